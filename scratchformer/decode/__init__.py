"""Decoding: greedy and beam search over a key/value cache, and text translation.

    from scratchformer.decode import DecodeOptions, beam_search, greedy_decode, translate
    greedy_decode(model, src)                               # list[list[int]], no <bos>/<eos>
    beam_search(model, src, DecodeOptions(beam_size=4))     # list[list[Hypothesis]]
    translate(model, tokenizer, ["a sentence"])             # list[str]

Every search reads its settings from one ``DecodeOptions`` (decode/options.py).

The decoding state is ``KVCache`` (scratchformer/nn/transformer.py: per decoder layer
the growing self-attention keys/values and the encoder output's cross-attention
keys/values), advanced by ``Transformer.decode_step``; it is called "kv", never
"cache", which names what a backward pass needs.
"""

from scratchformer.decode.beam import beam_search
from scratchformer.decode.common import DecodeError, Hypothesis, length_penalty
from scratchformer.decode.greedy import greedy_decode
from scratchformer.decode.options import DecodeOptions
from scratchformer.decode.translate import Translation, translate, translate_nbest
from scratchformer.nn.kv import KVCache, LayerKV

__all__ = [
    "DecodeError",
    "DecodeOptions",
    "Hypothesis",
    "KVCache",
    "LayerKV",
    "Translation",
    "beam_search",
    "greedy_decode",
    "length_penalty",
    "translate",
    "translate_nbest",
]
