"""The model API in one page: build, loss forward, backward, named gradients, gradient check.

python examples/01_model_api.py
"""

import numpy as np

from scratchformer import Transformer, TransformerConfig
from scratchformer.engine import backend, device
from scratchformer.engine.gradcheck import check_model
from scratchformer.engine.ops.loss import cross_entropy

config = TransformerConfig.preset("tiny", vocab_size=20)
model = Transformer(config)
print(f"tiny preset: {model.num_parameters()} parameters, N={config.N}, d_model={config.d_model}")

# Two sentence pairs, padded with 0. Decoder input starts with bos (1), output ends with eos (2).
src = np.array([[5, 6, 7, 0], [8, 9, 10, 11]])  # (B, S)
tgt_in = np.array([[1, 12, 13], [1, 14, 0]])  # (B, T)
tgt_out = np.array([[12, 13, 2], [14, 2, 0]])  # (B, T)

# Training step without an optimizer: a generator turns dropout on. It comes from
# scratchformer.engine.device, which gives the one that suits the backend (NumPy's or the GPU's).
loss, cache = model.loss_forward(src, tgt_in, tgt_out, rng=device.generator(0))
model.zero_grad()
model.loss_backward(cache)
n = int(cross_entropy.read(cache.loss, "n_tokens"))  # what the loss's cache declares
print(f"label-smoothed loss per target token: {float(loss):.4f} over {n} tokens")

grads = model.gradients()  # arrays of the backend: backend.asnumpy brings one to the host
for name in ["embed.E", "encoder.layers.0.self_attn.W_q", "decoder.layers.1.cross_attn.W_k"]:
    norm = np.linalg.norm(backend.asnumpy(grads[name]))
    print(f"  |d {name}| = {norm:.4f}  shape {grads[name].shape}")

# Prove two of those gradients with float64 central differences, dropout replayed.
report = check_model(
    model, src, tgt_in, tgt_out, rng=7, names=["embed.E", "decoder.layers.1.cross_attn.W_k"]
)
print(report.table())
assert report.passed
