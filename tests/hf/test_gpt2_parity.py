"""An imported GPT-2 computes what transformers computes: a random GPT-2 built by
transformers here (2 layers, 4 heads, a vocabulary of 2,600 from a BPE trained here),
saved with save_pretrained, imported by ``scratchformer.app.hf_import``:

- logits on a padded batch within max|diff| / max|logit| <= 1e-5 in float32;
- every parameter's gradient of the mean NLL over the non-pad targets equal to torch
  autograd's within 1e-10 relative (max|diff| / max|grad| per tensor) in float64;
- greedy generation identical token for token on 50 prompts in float64.

Slow: needs torch and transformers (the hf extra), skipped without them except under
CI=true.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from gpt2_folders import need, transformers_gpt2

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.hf_import import import_folder
from scratchformer.engine import backend as B
from scratchformer.engine.backend import xp
from scratchformer.engine.decode.sample import generate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(transformers' model, our model, tokenizer): the same random GPT-2."""
    need("torch")
    folder = tmp_path_factory.mktemp("gpt2") / "random-gpt2"
    theirs = transformers_gpt2(folder)
    ckpt = import_folder(folder, folder.parent / "gpt2.npz")
    loaded, tok = load_with_tokenizer(ckpt)
    return theirs, loaded.model, tok


def padded_batch(V: int, eot: int, seed: int = 0):
    """ids (4, 12) = <|endoftext|> x (x holding <|endoftext|> inside too), targets = x
    <|endoftext|>, rows of 12, 9, 5 and 2, padded with our padding id V."""
    r = np.random.default_rng(seed)
    ids, targets = np.full((4, 12), V), np.full((4, 12), V)
    for b, n in enumerate([12, 9, 5, 2]):
        x = r.integers(1, V, n)
        x[n // 2] = eot
        ids[b, :n], targets[b, :n] = np.r_[eot, x[:-1]], np.r_[x[:-1], eot]
    return ids, targets


def torch_inputs(ids, V):
    """transformers' inputs for our padded ids: the padding as token 0, masked."""
    torch = need("torch")
    keep = ids != V
    return torch.tensor(np.where(keep, ids, 0)), torch.tensor(keep.astype(np.int64))


def test_logits_equal_transformers_on_a_padded_batch_float32(pair):
    torch = need("torch")
    theirs, ours, _ = pair
    V, eot = ours.config.vocab_size, ours.config.eos_id
    ids, _ = padded_batch(V, eot)
    x, mask = torch_inputs(ids, V)
    with torch.no_grad():
        want = theirs.float()(x, attention_mask=mask).logits.numpy()
    got = B.asnumpy(ours.forward(ids)[0])
    assert got.dtype == np.float32 and want.dtype == np.float32
    keep = ids != V
    rel = np.abs(got - want)[keep].max() / np.abs(want[keep]).max()
    print(f"\nfloat32 logits, {int(keep.sum())} real positions of 4 x 12: "
          f"max|diff| / max|logit| = {rel:.2e}")
    assert rel <= 1e-5


def hf_gradients(model64, names) -> dict:
    """Our gradients in GPT-2's layout: c_attn's the three projections' side by side."""
    g = {k: B.asnumpy(v) for k, v in model64.gradients().items()}
    out = {"transformer.wte.weight": g["embed.E"], "transformer.wpe.weight": g["decoder.pos.P"]}
    for i in range(model64.config.N):
        o, h = f"decoder.layers.{i}.", f"transformer.h.{i}."
        out[h + "attn.c_attn.weight"] = np.concatenate(
            [g[o + f"self_attn.W_{c}"] for c in "qkv"], axis=1
        )
        out[h + "attn.c_attn.bias"] = np.concatenate([g[o + f"self_attn.b_{c}"] for c in "qkv"])
        for theirs, mine in (
            ("attn.c_proj.weight", "self_attn.W_o"), ("attn.c_proj.bias", "self_attn.b_o"),
            ("ln_1.weight", "self_attn_norm.gamma"), ("ln_1.bias", "self_attn_norm.beta"),
            ("mlp.c_fc.weight", "ffn.W_1"), ("mlp.c_fc.bias", "ffn.b_1"),
            ("mlp.c_proj.weight", "ffn.W_2"), ("mlp.c_proj.bias", "ffn.b_2"),
            ("ln_2.weight", "ffn_norm.gamma"), ("ln_2.bias", "ffn_norm.beta"),
        ):
            out[h + theirs] = g[o + mine]
    out["transformer.ln_f.weight"] = g["decoder.norm.gamma"]
    out["transformer.ln_f.bias"] = g["decoder.norm.beta"]
    assert sorted(out) == sorted(names)
    return out


def test_every_gradient_equals_torch_autograd_float64(pair):
    """The mean NLL over non-pad targets (torch: cross_entropy with the padding's labels
    -100), every one of transformers' parameters (wte's gradient holds the tied
    lm_head's), dropout off (transformers: eval mode)."""
    torch = need("torch")
    theirs, ours, _ = pair
    V, eot = ours.config.vocab_size, ours.config.eos_id
    ids, targets = padded_batch(V, eot, seed=1)
    m64 = theirs.double().eval()
    m64.zero_grad()
    x, mask = torch_inputs(ids, V)
    labels = torch.tensor(np.where(targets == V, -100, targets))
    logits = m64(x, attention_mask=mask).logits
    loss_t = torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    loss_t.backward()
    want = {n: p.grad.numpy() for n, p in m64.named_parameters()}

    mine = copy.deepcopy(ours).astype(xp.float64)
    loss, cache = mine.loss_forward(ids, targets)
    mine.zero_grad()
    mine.loss_backward(cache)
    assert abs(float(loss) - loss_t.item()) <= 1e-12 * abs(loss_t.item())
    got = hf_gradients(mine, want)
    worst = 0.0
    for name, w in want.items():
        rel = np.abs(got[name] - w).max() / np.abs(w).max()
        worst = max(worst, rel)
        assert rel <= 1e-10, f"{name}: {rel:.2e}"
    print(f"\nfloat64: loss {float(loss):.12f} (torch {loss_t.item():.12f}); {len(want)} "
          f"parameters, largest max|diff| / max|grad| = {worst:.2e}")


def test_greedy_generation_identical_on_50_prompts_float64(pair):
    torch = need("torch")
    theirs, ours, tok = pair
    V, eot = ours.config.vocab_size, ours.config.eos_id
    m64 = theirs.double().eval()
    mine = copy.deepcopy(ours).astype(xp.float64)
    r = np.random.default_rng(7)
    ended = 0
    for k in range(50):
        prompt = [int(i) for i in r.integers(1, V, int(r.integers(1, 11)))]
        if k % 2 == 0:
            prompt = [eot, *prompt]
        ours_new = generate(mine, prompt, max_new_tokens=20, temperature=0)[0]
        with torch.no_grad():
            out = m64.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=20, do_sample=False, num_beams=1, eos_token_id=eot,
                pad_token_id=eot,
            )[0, len(prompt):].tolist()
        if len(out) < 20 or (out and out[-1] == eot):  # transformers keeps the <eos> it drew
            assert out[-1] == eot
            out, ended = out[:-1], ended + 1
        assert ours_new == out, (k, prompt)
    print(f"\n50 prompts, greedy in float64: identical ({ended} ended at <|endoftext|>)")
