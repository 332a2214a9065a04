"""Module: owns named parameters and their gradients, never activations.

    out, cache = module.forward(x, ...)     # cache: everything backward needs
    dx = module.backward(dout, cache)       # ADDS into module.grads[...]

Parameters live in ``self.params`` (name -> array) and their gradients in
``self.grads`` (same names, same shapes). Sub-modules assigned as attributes are found
automatically and give dotted names: ``encoder.layers.0.self_attn.W_q``. A module used
in several places (the tied embedding) is named once, at its first path.

Parameters are always updated in place (the optimizer writes ``p -= ...``,
``load_state_dict`` writes ``p[...] = value``), so references held elsewhere stay valid.

``Module.parameter_shapes(*args)`` answers the names and shapes of the parameters a
module built with ``args`` has, without allocating them: the constructor itself runs
inside ``shapes_only()``, where the initialisers below (``xavier_uniform``, ``normal``,
``zeros``, ``ones``) return a ``Declared`` shape instead of an array. The shapes are so
read from the one place that declares them, and a memory estimate or a checkpoint's
shape check can use them before anything is allocated.
"""

from __future__ import annotations

import contextlib
import math

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.errors import StateDictError
from scratchformer.engine.nn.flat import FlatParameters


class Declared:
    """A parameter declared but not allocated (inside ``shapes_only()``): its shape alone.
    An initialiser's writes into it (an embedding's zeroed padding row) are dropped."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(int(n) for n in shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __setitem__(self, key, value) -> None:
        pass

    def __repr__(self) -> str:
        return f"Declared{self.shape}"


_SHAPES_ONLY = [False]


@contextlib.contextmanager
def shapes_only():
    """Modules built inside declare their parameters (``Declared`` shapes) and allocate
    nothing: no parameter, gradient or constant table."""
    before = _SHAPES_ONLY[0]
    _SHAPES_ONLY[0] = True
    try:
        yield
    finally:
        _SHAPES_ONLY[0] = before


def allocating() -> bool:
    """False inside ``shapes_only()``: a constructor skips its constant tables then."""
    return not _SHAPES_ONLY[0]


class Module:
    def __init__(self):
        object.__setattr__(self, "params", {})
        object.__setattr__(self, "grads", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "flat", None)  # FlatParameters once ``flatten`` ran

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self._modules[name] = value
        elif name in self._modules:  # re-assigning a sub-module slot to None or a value
            del self._modules[name]
        object.__setattr__(self, name, value)

    # -- parameters ---------------------------------------------------------------------
    def add_parameter(self, name: str, value):
        """Register ``value`` (host or device array) as a parameter in the default dtype
        (a ``Declared`` shape inside ``shapes_only()``, for parameter and gradient)."""
        if isinstance(value, Declared):
            self.params[name] = self.grads[name] = value
            return value
        value = backend.asarray(value, dtype=backend.get_dtype())
        self.params[name] = value
        self.grads[name] = xp.zeros_like(value)
        return value

    def named_modules(self, prefix: str = "", _seen=None):
        """Yield ``(dotted_name, module)`` for this module and every sub-module, once each."""
        seen = set() if _seen is None else _seen
        if id(self) in seen:
            return
        seen.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name, seen)

    def parameters(self) -> dict:
        """Flat ``{dotted name: parameter array}`` (live references, not copies)."""
        return {
            f"{mname}.{pname}" if mname else pname: p
            for mname, m in self.named_modules()
            for pname, p in m.params.items()
        }

    def gradients(self) -> dict:
        """Flat ``{dotted name: gradient array}``, the same names as ``parameters()``."""
        return {
            f"{mname}.{pname}" if mname else pname: g
            for mname, m in self.named_modules()
            for pname, g in m.grads.items()
        }

    def flatten(self) -> FlatParameters:
        """Move every parameter and gradient into two flat buffers (``nn/flat.py``) and
        point this module and its sub-modules at views of them; values are kept. Returns
        the ``FlatParameters``; a second call returns the same one.

        Training flattens its model, so that the passes over every parameter (zeroing,
        the gradient norm, Adam, the all-reduce) are passes over one array.
        """
        if self.flat is None:
            flat = FlatParameters(self.parameters(), self.gradients())
            for mname, m in self.named_modules():
                object.__setattr__(m, "flat", None)  # a sub-module's own buffers are left
                for pname in m.params:
                    name = f"{mname}.{pname}" if mname else pname
                    m.params[pname] = flat.view(flat.params, name)
                    m.grads[pname] = flat.view(flat.grads, name)
            object.__setattr__(self, "flat", flat)
        return self.flat

    def __getstate__(self) -> dict:
        """What a copy or a pickle holds: everything but the flat buffers (copying views
        one by one cuts them off the copied buffers); ``__setstate__`` flattens again."""
        state = dict(vars(self))
        state["flat"] = None
        state["_flattened"] = self.flat is not None
        return state

    def __setstate__(self, state: dict) -> None:
        flattened = state.pop("_flattened", False)
        vars(self).update(state)
        if flattened:
            self.flatten()

    @classmethod
    def parameter_shapes(cls, *args, **kwargs) -> dict[str, tuple]:
        """``{dotted name: shape}`` of the parameters of ``cls(*args, **kwargs)``, in the
        order of ``parameters()``, read from the constructor run inside
        ``shapes_only()``: nothing is allocated (``Transformer.parameter_shapes(config)``)."""
        with shapes_only():
            module = cls(*args, **kwargs)
        return {name: p.shape for name, p in module.parameters().items()}

    def num_parameters(self) -> int:
        return sum(int(p.size) for p in self.parameters().values())

    def astype(self, dtype) -> Module:
        """Convert every floating array held by every sub-module (parameters, gradients,
        constant tables such as the sinusoids) to ``dtype``; returns self. The module is
        changed, but its arrays are replaced by new ones: references held elsewhere (an
        optimizer's) no longer follow it, so build optimizers afterwards.

        Used to run a float32 model's gradient check in float64 (on a deep copy). A
        flattened module is flattened again in the new dtype.
        """
        was_flat = self.flat is not None
        object.__setattr__(self, "flat", None)
        for _, m in self.named_modules():
            for store in (m.params, m.grads):
                for k, v in store.items():
                    store[k] = v.astype(dtype)
            for k, v in vars(m).items():
                if backend.is_array(v) and v.dtype.kind == "f":
                    object.__setattr__(m, k, v.astype(dtype))
        if was_flat:
            self.flatten()
        return self

    def zero_grad(self) -> None:
        """Set every gradient to zero (backward only ever adds): one pass over the flat
        gradient when the module is flattened."""
        if self.flat is not None:
            self.flat.grads.fill(0)
            return
        for g in self.gradients().values():
            g.fill(0)

    # -- state dict ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Flat ``{name: numpy array}`` host copies of every parameter."""
        return {k: backend.asnumpy(v).copy() for k, v in self.parameters().items()}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy ``state`` into the parameters in place. Keys and shapes must match exactly
        and every entry must be a floating-point array (integers, booleans, complex numbers
        or objects are refused, never cast); a float of another width is converted to the
        parameter's dtype (checkpoints refuse that earlier: ``checkpoint_read``). With
        ``strict=False`` missing and unexpected keys are allowed (shapes still checked).
        """
        params = self.parameters()
        missing = sorted(set(params) - set(state))
        unexpected = sorted(set(state) - set(params))
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing keys {missing[:8]}{' ...' if len(missing) > 8 else ''}")
            if unexpected:
                parts.append(
                    f"unexpected keys {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}"
                )
            raise StateDictError("state dict does not match the model: " + "; ".join(parts))
        bad = [
            f"{k}: model {tuple(params[k].shape)} vs state {tuple(state[k].shape)}"
            for k in params
            if k in state and tuple(params[k].shape) != tuple(state[k].shape)
        ]
        if bad:
            raise StateDictError("state dict shapes do not match the model: " + "; ".join(bad))
        other = [
            f"{k}: {state[k].dtype}"
            for k in params
            if k in state and backend.np.dtype(state[k].dtype).kind != "f"
        ]
        if other:
            raise StateDictError(
                "state dict entries must be floating-point arrays (never cast from integers, "
                "booleans, complex numbers or objects): " + "; ".join(other[:4])
            )
        for k, p in params.items():
            if k in state:
                p[...] = backend.asarray(state[k], dtype=p.dtype)


class ModuleList(Module):
    """A list of modules named ``0``, ``1``, ... in dotted names."""

    def __init__(self, modules):
        super().__init__()
        self._items = []
        for i, m in enumerate(modules):
            setattr(self, str(i), m)
            self._items.append(m)

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __getitem__(self, i):
        return self._items[i]


# -- initialisation (on the host, seeded, then moved to the backend) -------------------
# Inside ``shapes_only()`` each returns the ``Declared`` shape and draws nothing.
def xavier_uniform(rng, fan_in: int, fan_out: int, shape=None):
    """U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010)."""
    shape = shape or (fan_in, fan_out)
    if _SHAPES_ONLY[0]:
        return Declared(shape)
    a = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=shape)


def normal(rng, std: float, shape):
    """N(0, std^2) entries."""
    if _SHAPES_ONLY[0]:
        return Declared(shape)
    return rng.normal(0.0, std, size=shape)


def zeros(*shape: int):
    """A parameter's initial zeros (biases, LayerNorm's beta): ``zeros(d_out)``."""
    return Declared(shape) if _SHAPES_ONLY[0] else xp.zeros(shape)


def ones(*shape: int):
    """A parameter's initial ones (LayerNorm's gamma)."""
    return Declared(shape) if _SHAPES_ONLY[0] else xp.ones(shape)
