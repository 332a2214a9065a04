"""Greedy decoding, batched, over a key/value cache.

    memory = encode(src)                             once per batch
    kv     = cross-attention K/V of memory           once per sentence and layer
    y_0    = <bos>
    step t: logits = decode_step(y_t, kv)            one new position per row
            y_{t+1} = argmax (after the token rules of decode/common.py)
            a row that emits <eos> (or reaches its maximum length, where <eos> is
            forced) is finished and dropped from the batch (``kv.reorder``)

Each step costs one position's worth of decoder work per row, against the whole
prefix when recomputing (benchmarks/decode_speed.py measures the difference).

Dimension key: ``B`` sentences, ``S`` source length, ``V`` vocabulary, ``R`` rows still
decoding (R <= B).
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.decode.common import (
    check_vocabulary,
    constrain,
    max_output_lengths,
    nan_scores,
    next_scores,
    source_lengths,
    start_column,
)
from scratchformer.engine.decode.options import DecodeOptions, options_of

#: greedy decoding's options when none are given
GREEDY = DecodeOptions(search="greedy")


def greedy_decode(
    model, src, options: DecodeOptions | None = None, writes=None, **settings
) -> list[list[int]]:
    """Most probable token at every step, for a batch of sentences.

    model: a ``Transformer``; src (B, S) int ids, right-padded with pad_id (host or
    backend array); ``options``: its lengths (decode/common.py: ``L_i = min(floor(a S_i
    + b), max_len - 1)`` tokens, then <eos> forced; <eos> forbidden before ``min_len``;
    <pad>/<bos> never emitted) and the decoder's start; ``writes``: host bool (V,), the
    tokens that write text, for outputs that are never blank; ``settings``: fields of
    ``DecodeOptions`` by name.

    Returns B lists of token ids, without <bos> and <eos>.
    """
    options = options_of(options, GREEDY, settings)
    cfg = model.config
    min_len = options.min_len
    check_vocabulary(cfg, min_len)
    np = backend.np
    src = src if backend.is_array(src) else np.asarray(src)  # host ids stay on the host
    lengths = source_lengths(model, src)  # (B,) host
    max_lens = max_output_lengths(lengths, options.max_len_a, options.max_len_b, cfg.max_len)
    B = src.shape[0]
    memory, src_mask = model.encode_infer(src)  # (B, S, D), (B, 1, 1, S)
    padded = bool(lengths.min() < src.shape[1])  # the host lengths: no read
    kv = model.init_kv(memory, src_mask, 1, int(max_lens.max()) + 1, padded)

    outputs = [[] for _ in range(B)]
    wrote = np.zeros(B, dtype=bool)  # whether each sentence's tokens write text yet
    active = np.arange(B)  # the sentence each row decodes
    tokens = start_column(B, cfg, options)  # (R, 1) the next decoder input of every row
    for step in range(int(max_lens.max()) + 1):
        scores = next_scores(model, tokens, kv)  # (R, V) logits: their argmax is log p's
        nan = xp.isnan(scores.max(axis=-1))  # (R,) a row holding NaN, before the rules
        silent = None if writes is None else ~wrote[active]
        scores = constrain(scores, step, max_lens[active], min_len, cfg, silent, writes)
        # (R,) first max on ties; -1 marks a row whose scores are NaN (one read for both)
        next_tok = backend.asnumpy(xp.where(nan, -1, xp.argmax(scores, axis=-1)))
        if (next_tok < 0).any():
            raise nan_scores(model)
        going = next_tok != cfg.eos_id  # <eos> finishes a row (forced at its max length)
        for b, tok in zip(active[going], next_tok[going]):
            outputs[b].append(int(tok))
        if writes is not None:
            wrote[active[going]] |= writes[next_tok[going]]
        if not going.any():
            break
        if not going.all():
            keep = np.flatnonzero(going)
            kv.reorder(keep, sentences=keep)  # drop finished rows (K = 1: rows = sentences)
            active, next_tok = active[keep], next_tok[keep]
        tokens = next_tok[:, None].astype(np.int64)  # (R, 1) host: decode_step moves it
    return outputs


__all__ = ["greedy_decode"]
