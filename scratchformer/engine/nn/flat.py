"""Flat buffers: every parameter a view into one contiguous array, every gradient into a
second (the layout of llm.c).

    flat = model.flatten()          # FlatParameters; the model's arrays now live in it
    flat.params                     # (n,) every parameter, one after another
    flat.grads                      # (n,) every gradient, in the same places
    flat.view(flat.grads, "encoder.layers.0.self_attn.W_q")   # (D, H*Dk), a view

Parameter ``k`` with shape ``s_k`` occupies ``flat.params[o_k : o_k + prod(s_k)]``, read
in C order, with ``o_k`` the sizes of the parameters before it summed (in the order of
``model.parameters()``). Because a module's arrays are views, a backward that adds into
``module.grads[name]`` adds into ``flat.grads``, and an update of ``flat.params`` in
place is an update of every parameter. So the work that touches every parameter once is
one pass over one array instead of one per tensor: zeroing the gradients, their global
norm and clipping, the finiteness check, Adam, and summing the gradients of several
processes (one all-reduce of ``flat.grads``).

The names, and so the checkpoints, do not change: ``view`` maps a name to its slice.
"""

from __future__ import annotations

import math

from scratchformer.engine import backend


class FlatParameters:
    """``FlatParameters({name: array})``: copies of the arrays in one flat buffer (all of
    one floating dtype), a zeroed flat gradient of the same size, and the name -> slice
    table. ``Module.flatten`` builds one and points the module's arrays into it."""

    def __init__(self, arrays: dict, grads: dict | None = None):
        dtypes = {a.dtype for a in arrays.values()}
        if len(dtypes) != 1:
            have = sorted(map(str, dtypes))
            raise ValueError(f"flat buffers need one dtype, the arrays have {have}")
        (self.dtype,) = dtypes
        self.shapes = {k: tuple(a.shape) for k, a in arrays.items()}
        self.offsets, n = {}, 0
        for k, shape in self.shapes.items():
            self.offsets[k] = n
            n += math.prod(shape)
        self.size = n
        xp = backend.xp
        self.params = xp.empty(n, dtype=self.dtype)
        self.grads = xp.zeros(n, dtype=self.dtype)
        for k, a in arrays.items():
            self.view(self.params, k)[...] = a
            if grads is not None:
                self.view(self.grads, k)[...] = grads[k]

    @property
    def names(self) -> list[str]:
        return list(self.shapes)

    def view(self, flat, name: str):
        """The slice of ``flat`` (a parameter-sized flat array) that holds ``name``, in its
        shape: writing to it writes into ``flat``."""
        start = self.offsets[name]
        shape = self.shapes[name]
        return flat[start : start + math.prod(shape)].reshape(shape)

    def views(self, flat) -> dict:
        """``{name: view}`` of every parameter's slice of ``flat``."""
        return {k: self.view(flat, k) for k in self.shapes}

    def name_at(self, index: int) -> str:
        """The parameter that holds flat position ``index``."""
        for k in reversed(self.shapes):
            if self.offsets[k] <= index:
                return k
        raise IndexError(index)

    def first_nonfinite(self, flat) -> str:
        """'' when every entry of ``flat`` is finite, else the name of the first parameter
        whose slice is not (one pass over ``flat``; a second one only to find the name)."""
        xp = backend.xp
        if bool(xp.isfinite(flat).all()):
            return ""
        return self.name_at(int(xp.argmin(xp.isfinite(flat))))


__all__ = ["FlatParameters"]
