"""The key/value decoding state ("kv"; not a backward cache) of a decoder stack.

Incremental decoding runs the decoder one new target position (or a block of them) at
a time. Each self-attention layer keeps the keys and values of the positions decoded
so far, so a step projects only the new positions; each cross-attention layer keeps the
encoder output's keys and values, projected once per sentence.

Dimension key: ``B`` sentences, ``K`` beams per sentence, ``R = B * K`` decoding rows,
``H`` heads, ``C`` kv capacity (target positions), ``S`` source length, ``Dh`` d_k,
``Dv`` d_v.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.errors import ScratchformerError


def init_self_kv(sa, rows: int, capacity: int, dtype):
    """Empty self-attention buffers of the attention module ``sa`` for ``rows`` rows
    and ``capacity`` positions: (R, H, C, Dh) and (R, H, C, Dv). A variant that cannot
    decode at an offset is refused here, in one line."""
    if not sa.decodes_at_offset:
        raise DecodeStateError(f"attention {sa.kind!r} cannot decode one position at a time")
    self_k = xp.zeros((rows, sa.h, capacity, sa.d_k), dtype=dtype)
    self_v = xp.zeros((rows, sa.h, capacity, sa.d_v), dtype=dtype)
    return self_k, self_v


class DecodeStateError(ScratchformerError):
    """A decoding step does not fit its kv (wrong number of rows, capacity exceeded)."""


@dataclass
class LayerKV:
    """One decoder layer's decoding state.

    self_k (R, H, C, Dh), self_v (R, H, C, Dv): preallocated buffers of the masked
        self-attention's keys/values; positions ``0 .. KVCache.length - 1`` are filled.
    cross_k, cross_v: None in a decoder-only language model.
    cross_k (B, H, S, Dh), cross_v (B, H, S, Dv): the encoder-decoder attention's
        keys/values, projected from the encoder output ONCE PER SENTENCE (not per beam).
        The K beams of a sentence share them: ``DecoderLayer.step`` folds the beams into
        the query axis, ``(B*K, T, D) -> (B, K*T, D)``, so the K beams are K more queries
        against the same (B, H, S, Dh) keys, with no copy and no recomputation.
    """

    self_k: object
    self_v: object
    cross_k: object
    cross_v: object


@dataclass
class KVCache:
    """The decoding state of a decoder stack, advanced one step at a time.

    Rows are sentence-major: row ``r`` is beam ``r % K`` of sentence ``r // K``
    (``K = beams``; greedy decoding has K = 1), so ``R = B * K``.

    layers     one ``LayerKV`` per decoder layer
    src_mask   (B, 1, 1, S) bool, True at real source tokens (cross-attention keys);
               None for a decoder-only language model (no cross-attention)
    padded     whether any source may be padded: if not, cross-attention needs no
               mask (the decoders know it from the lengths they read anyway)
    beams      K, rows per sentence
    length     target positions already stored; the next step's inputs sit at
               positions ``length, length + 1, ...`` (the positional-encoding offset)

    ``reorder(rows, sentences)`` is called after each beam-search step: new row ``i``
    continues old row ``rows[i]`` (a surviving beam's parent), and finished sentences
    can be dropped at the same time.
    """

    layers: list
    src_mask: object
    beams: int
    length: int = 0
    padded: bool = True  # whether any source may be padded (see cross_mask)

    @property
    def cross_mask(self):
        """The mask cross-attention applies: ``src_mask``, or None when no source is
        padded (an all-True mask hides nothing; without it the softmax skips its three
        masking operations at every step)."""
        return self.src_mask if self.padded else None

    @property
    def rows(self) -> int:
        """R = B * K."""
        return int(self.layers[0].self_k.shape[0])

    @property
    def sentences(self) -> int:
        """B, the sentences whose cross-attention keys are held."""
        if self.src_mask is None:
            return self.rows // self.beams
        return int(self.src_mask.shape[0])

    @property
    def capacity(self) -> int:
        """C, the most target positions a step may reach."""
        return int(self.layers[0].self_k.shape[2])

    def check_step(self, rows: int, T: int) -> None:
        """A step of ``T`` new positions for ``rows`` rows must fit this kv."""
        if rows != self.rows:
            raise DecodeStateError(f"step got {rows} rows, the kv holds {self.rows}")
        if self.length + T > self.capacity:
            raise DecodeStateError(
                f"step would fill position {self.length + T - 1}, beyond the kv capacity "
                f"of {self.capacity} positions"
            )

    def reorder(self, rows, sentences=None) -> None:
        """Keep, for each new row ``i``, the self-attention keys/values of old row ``rows[i]``.

        rows (R',) int: parent row of each new row (repeats allowed: two beams may grow
            from one parent), sentence-major with K rows per sentence, so new row ``i``
            must belong to new sentence ``i // K``.
        sentences (B',) int or None: old sentence of each new sentence (drop finished
            ones); None keeps all. R' must equal B' * K.

        Only the ``length`` filled positions are copied; an identity ``rows`` is free.
        """
        np = backend.np
        rows_h = np.asarray(backend.asnumpy(rows), dtype=np.int64).reshape(-1)
        n_sent = self.sentences if sentences is None else len(sentences)
        if n_sent > self.sentences:
            raise DecodeStateError(f"reorder: {n_sent} sentences kept of {self.sentences}")
        if rows_h.size != n_sent * self.beams:
            raise DecodeStateError(
                f"reorder: {rows_h.size} rows for {n_sent} sentences of {self.beams} beams"
            )
        if rows_h.size and (rows_h.min() < 0 or rows_h.max() >= self.rows):
            raise DecodeStateError(f"reorder: row index out of range for {self.rows} rows")
        if sentences is not None and self.src_mask is not None:
            sent = backend.asarray(np.asarray(backend.asnumpy(sentences), dtype=np.int64))
            self.src_mask = self.src_mask[sent]
            for lkv in self.layers:
                lkv.cross_k, lkv.cross_v = lkv.cross_k[sent], lkv.cross_v[sent]
        if rows_h.size == self.rows and np.array_equal(rows_h, np.arange(self.rows)):
            return
        idx, n = backend.asarray(rows_h), rows_h.size
        for lkv in self.layers:
            for name in ("self_k", "self_v"):
                buf = getattr(lkv, name)
                t = self.length
                # Fancy indexing copies first, so writing into the same buffer is safe.
                buf[:n, :, :t] = buf[idx, :, :t]
                setattr(lkv, name, buf[:n])


__all__ = ["DecodeStateError", "KVCache", "LayerKV", "init_self_kv"]
