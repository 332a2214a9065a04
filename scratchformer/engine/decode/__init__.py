"""Decoding: greedy, beam search and sampling over a key/value cache (text in and out,
with a tokenizer, is the application's: scratchformer/app/translate.py).

    from scratchformer.engine.decode import DecodeOptions, beam_search, greedy_decode
    greedy_decode(model, src)                               # list[list[int]], no <bos>/<eos>
    beam_search(model, src, DecodeOptions(beam_size=4))     # list[list[Hypothesis]]
    sample_decode(model, src, DecodeOptions(search="sample", top_p=0.9, samples=3))
    generate(lm, prompt, temperature=0.8, top_k=20)         # a language model's samples

Every search reads its settings from one ``DecodeOptions`` (decode/options.py).

The decoding state is ``KVCache`` (scratchformer/engine/nn/transformer.py: per decoder layer
the growing self-attention keys/values and the encoder output's cross-attention
keys/values), advanced by ``Transformer.decode_step``; it is called "kv", never
"cache", which names what a backward pass needs.
"""

from scratchformer.engine.decode.beam import beam_search
from scratchformer.engine.decode.common import DecodeError, Hypothesis, length_penalty
from scratchformer.engine.decode.greedy import greedy_decode
from scratchformer.engine.decode.options import DecodeOptions
from scratchformer.engine.decode.sample import generate, sample_decode
from scratchformer.engine.nn.kv import KVCache, LayerKV

__all__ = [
    "DecodeError",
    "DecodeOptions",
    "Hypothesis",
    "KVCache",
    "LayerKV",
    "beam_search",
    "generate",
    "greedy_decode",
    "length_penalty",
    "sample_decode",
]
