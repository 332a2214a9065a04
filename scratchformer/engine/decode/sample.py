"""Sampling from a decoder-only language model, over a key/value cache.

    kv = model.init_kv(rows)
    logits = model.decode_step(prompts, kv)           the whole prompt at once
    step t: p = softmax(logits[:, -1] / temperature), keep the top_k most probable,
            renormalise, draw; feed the drawn token back (one new position per row)

``temperature`` -> 0 is greedy (argmax); ``top_k = 0`` keeps the whole vocabulary.
<pad> and <bos> are never drawn (a <bos> that is also <eos> may be: it ends the sample);
a row that draws <eos> stops (its later draws are ignored). All rows of a batch share
the prompt length (``generate`` groups by length).

Dimension key: ``R`` rows (samples), ``P`` prompt length, ``V`` vocabulary.
"""

from __future__ import annotations

import math

from scratchformer.engine import backend
from scratchformer.engine.decode.common import check_decode_memory
from scratchformer.engine.errors import ScratchformerError


class SamplingError(ScratchformerError):
    """Bad sampling settings (negative temperature, top_k, lengths)."""


def sample_next(logits, temperature: float, top_k: int, rng, banned=()):
    """logits (R, V)  ->  drawn ids (R,) host int64, from softmax(logits / temperature)
    restricted to the ``top_k`` largest (``banned`` ids excluded)."""
    np = backend.np
    z = backend.asnumpy(logits).astype(np.float64)  # (R, V) host: one draw per row
    if banned:
        z[:, list(banned)] = -np.inf
    if temperature == 0:
        return z.argmax(axis=-1)
    z = z / temperature
    if 0 < top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[:, -top_k][:, None]  # (R, 1)
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    u = rng.random((z.shape[0], 1))  # inverse-CDF draw, one uniform per row
    return np.minimum((p.cumsum(axis=-1) < u).sum(axis=-1), z.shape[-1] - 1)


def generate(
    model,
    prompt,
    max_new_tokens: int = 200,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
    num_samples: int = 1,
) -> list[list[int]]:
    """Continue ``prompt`` (a list of ids, starting with <bos> if the model was trained
    so) ``num_samples`` times; returns the new ids of each sample, without <eos>.

    Stops at <eos> or after ``max_new_tokens`` (or the position table's end).
    """
    if not (math.isfinite(temperature) and temperature >= 0):
        raise SamplingError(f"temperature must be a finite number >= 0, got {temperature}")
    for name, v, lo in (("top_k", top_k, 0), ("seed", seed, 0), ("num_samples", num_samples, 1)):
        if not isinstance(v, int) or v < lo:
            raise SamplingError(f"{name} must be a whole number >= {lo}, got {v!r}")
    if not prompt:
        raise SamplingError("the prompt is empty: start it with <bos>")
    np = backend.np
    cfg = model.config
    rng = np.random.default_rng(seed)
    max_new = min(int(max_new_tokens), cfg.max_len - len(prompt))
    if max_new < 1:
        raise SamplingError(f"the prompt of {len(prompt)} fills max_len={cfg.max_len}")
    check_decode_memory(
        cfg,
        num_samples,
        len(prompt) + max_new,
        0,
        f"{num_samples} samples of up to {max_new} tokens",
        "ask for fewer samples or tokens",
    )
    kv = model.init_kv(num_samples, capacity=len(prompt) + max_new)
    # host tokens: decode_step checks them on the host and moves them (nothing read back)
    tokens = np.tile(np.asarray(prompt, dtype=np.int64), (num_samples, 1))
    out = [[] for _ in range(num_samples)]
    done = np.zeros(num_samples, dtype=bool)
    # <pad> and <bos> are never drawn, but a <bos> that is also <eos> ends a sample (GPT-2's
    # <|endoftext|>), and padding that is no token (pad_id = vocab_size) has no logit
    banned = tuple(i for i in (cfg.pad_id, cfg.bos_id) if i < cfg.vocab_size and i != cfg.eos_id)
    for _ in range(max_new):
        logits = model.decode_step(tokens, kv)[:, -1]  # (R, V)
        nxt = sample_next(logits, temperature, top_k, rng, banned)  # (R,) host
        for r in np.flatnonzero(~done):
            if nxt[r] == cfg.eos_id:
                done[r] = True
            else:
                out[r].append(int(nxt[r]))
        if done.all():
            break
        tokens = nxt[:, None].astype(np.int64)  # (R, 1) host
    return out


__all__ = ["SamplingError", "generate", "sample_next"]
