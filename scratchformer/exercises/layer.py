"""Layer exercises: write a module's backward (multi-head attention, the feed-forward
network, Add & Norm, an encoder layer, a decoder layer) from the backward passes of the
parts it is made of.

The learner writes functions of ``self`` (``multi_head_attention_backward(self, dout,
cache)``). While they are graded or a model trains with them, they *are* the module's
methods: ``swapped`` sets them on the module's class (``MultiHeadAttention.backward =
multi_head_attention_backward``) and puts the engine's back when it closes, so every
module of that class, in any model, runs the learner's backward meanwhile.

Grading is ``gradcheck.check_module`` on every input of the exercise (float64 central
differences of ``sum(out * dout)``, every input and parameter entry, dropout masks
replayed), and one more property the finite differences cannot see: the gradients are
*added* into ``self.grads`` (a module called twice, or a weight used twice, sums them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from scratchformer.engine import backend, device
from scratchformer.engine.backend import xp
from scratchformer.engine.gradcheck import check_module
from scratchformer.engine.nn.layers import AddNorm, Linear
from scratchformer.engine.nn.module import Module
from scratchformer.exercises import generic
from scratchformer.exercises.guard import guarded
from scratchformer.exercises.spec import (
    DRAWN,
    TOL,
    Exercise,
    LearnerError,
    Mistake,
    draw_seed,
    drawn_case,
    file_of,
    learner_code,
    needs,
    rule,
    source,
    stub,
)

_MISSING = object()
#: the entries of each tensor checked on a drawn case
DRAWN_ENTRIES = 6


@contextlib.contextmanager
def swapped(methods: dict):
    """``{(cls, attribute): function}`` set on the classes while the context is open."""
    saved = []
    try:
        for (cls, attr), fn in methods.items():
            saved.append((cls, attr, cls.__dict__.get(attr, _MISSING)))
            setattr(cls, attr, fn)
        yield
    finally:
        for cls, attr, old in reversed(saved):
            if old is _MISSING:
                delattr(cls, attr)
            else:
                setattr(cls, attr, old)


@dataclass
class LayerCase:
    label: str
    module: Callable  # () -> a fresh module in the default dtype
    args: Callable  # (dtype) -> the forward's positional arguments
    dropout_seed: int | None = None  # dropout on, its masks replayed from this seed


@dataclass
class Method:
    """A method the learner writes: ``cls.attr``, as the function ``name(self, ...)``."""

    cls: type
    attr: str
    name: str
    signature: str  # "multi_head_attention_backward(self, dout, cache)"
    docstring: str
    # the engine's code for it, where it is not the method itself (a step the engine
    # runs fused, written out for the exercise)
    engine: Callable | None = None


@dataclass
class LayerExercise(Exercise):
    name: str
    title: str
    summary: str
    section: str
    methods: tuple  # (Method, ...)
    given: tuple  # ((cls, attr, name), ...): the forward's methods, shown for reading
    intro: str
    imports: str
    cases: Callable  # () -> [LayerCase]
    inputs: tuple  # names of the input gradients the backward returns, in order
    hints: tuple = ()
    mistakes: tuple = ()
    helpers: tuple = ()  # ((cls, attr), ...) the engine's methods its solution calls
    # {(cls, attr): function}: forward methods written out step by step for the
    # exercise, set on their classes with the learner's backward (shown as given)
    forwards: dict = field(default_factory=dict)
    uses: Callable = field(default=lambda model: "")
    # drawn(r) -> [LayerCase]: modules and inputs of sizes drawn afresh each run
    drawn: Callable | None = None
    kind: str = "layer"

    @property
    def functions(self) -> tuple:
        return tuple(m.name for m in self.methods)

    @property
    def gradients(self) -> tuple:
        return self.inputs

    def engine(self) -> dict:
        return {m.name: m.engine or getattr(m.cls, m.attr) for m in self.methods}

    def used_by(self, model) -> str:
        return self.uses(model)

    # -- the learner's file ---------------------------------------------------------------
    def _imports(self) -> str:
        """The file's imports, with what the given forward and the engine's backward read
        (each method's globals resolve as in the engine)."""
        fns = [*self._given_functions(), *self.engine().values()]
        more, _ = needs(self.imports, fns, {f.__name__ for f in fns})
        return "\n".join([self.imports.strip(), *more])

    def _head(self) -> str:
        labels = "".join(f"\n    {label}" for label in self.case_labels())
        names = " and ".join(f"``{m.name}``" for m in self.methods)
        where = ", ".join(f"{m.cls.__name__}.{m.attr}" for m in self.methods)
        return (
            f'"""Exercise {self.name}: the backward pass of {self.title}. Write {names} below.\n\n'
            f"{self.intro.strip()}\n\n"
            f"    scratchformer exercise check {self.name}      grade it\n"
            f"    scratchformer exercise hint {self.name}       the next hint\n"
            f"    scratchformer exercise solution {self.name}   the engine's code, derivation\n\n"
            f"The derivation: {self.link()}.\n"
            f"What you write becomes {where} while it is checked or trains: ``self`` is\n"
            "the module, with its parameters in self.params and their gradients in\n"
            "self.grads (ADD into them: +=), its sub-modules as attributes. The forward is\n"
            "shown as the engine has it; the checker runs the engine's forward and compares\n"
            "every input and parameter gradient with float64 central differences on these\n"
            f"inputs:{labels}\n"
            '"""\n\n'
            f"from __future__ import annotations\n\n{self._imports()}\n\n"
            f'EXERCISE = "{self.name}"\n\n\n'
        )

    def _given_functions(self) -> list:
        own = {(cls, attr): fn for (cls, attr), fn in self.forwards.items()}
        return [own.get((cls, attr), getattr(cls, attr)) for cls, attr, _ in self.given]

    def _given(self) -> str:
        parts = [source(fn, name) for fn, (_, _, name) in zip(self._given_functions(), self.given)]
        title = "given: the forward pass, as in the engine (for reading; not run from here)"
        return f"{rule(title)}\n" + "\n\n".join(parts)

    def file_text(self) -> str:
        stubs = [stub(m.signature, m.docstring, m.name) for m in self.methods]
        return (
            f"{self._head()}{self._given()}\n\n{rule('yours: the backward pass')}\n"
            + "\n\n".join(stubs)
        )

    def solution_text(self) -> str:
        parts = [source(self.engine()[m.name], m.name) for m in self.methods]
        return (
            f"{self._head()}{self._given()}\n\n{rule('the engine: the backward pass')}\n"
            + "\n\n".join(parts)
        )

    def helper_sources(self) -> list[str]:
        """The engine's methods its backward calls on ``self``, for ``solution``."""
        return [source(getattr(cls, attr)) for cls, attr in self.helpers]

    # -- running code on the inputs -------------------------------------------------------
    def case_labels(self) -> list[str]:
        return [c.label for c in self._cases()]

    def _cases(self) -> list[LayerCase]:
        """The designed cases, then (while ``drawing``) those drawn from the run's seed."""
        found = self.cases()
        seed = draw_seed()
        if seed is not None and self.drawn is not None:
            found += self.drawn(backend.host_rng(seed))
        return found

    def _methods(self, code: dict) -> dict:
        return {**self.forwards, **{(m.cls, m.attr): code[m.name] for m in self.methods}}

    def _path(self, code: dict) -> str | None:
        fn = code[self.methods[0].name]
        return file_of(fn)

    def _module(self, case: LayerCase, dtype: str, seed: int):
        """The case's module in ``dtype``, every parameter moved off its initial value
        (LayerNorm's gamma = 1 and the zero biases would hide mistakes), and random
        gradients already in ``grads`` (a backward must add to them)."""
        m = case.module().astype(getattr(xp, dtype))
        r = backend.host_rng(seed)
        for p in m.parameters().values():
            p += backend.asarray(0.3 * r.standard_normal(p.shape), dtype=p.dtype)
        for g in m.gradients().values():
            g[...] = backend.asarray(r.standard_normal(g.shape), dtype=g.dtype)
        return m

    def outputs(self, code: dict, dtype: str = "float64", limit: int | None = None) -> list:
        results = []
        doing = " / ".join(self.functions)
        for i, case in enumerate(self._cases()[:limit]):
            made: dict = {}

            def make(case=case, i=i, made=made):
                m = self._module(case, dtype, seed=100 + i)
                made["m"], made["before"] = m, {k: g.copy() for k, g in m.gradients().items()}
                args = case.args(dtype)
                rng = None if case.dropout_seed is None else device.generator(case.dropout_seed)
                with swapped(self.forwards):
                    out, cache = m.forward(*args, rng=rng)
                r = backend.host_rng(1000 + i)
                dout = backend.asarray(r.standard_normal(out.shape), dtype=dtype)
                inputs = {"dout": dout, "cache": cache, "self.params": m.parameters()}
                return inputs, lambda: m.backward(dout, cache)

            with swapped(self._methods(code)), drawn_case(case.label):
                ret = guarded(make, self._path(code), doing)
                results.append(self._named(ret, made["m"], made["before"]))
        return results

    def facts(self) -> list[dict]:
        """Per input, the scales the generic diagnoses name: the batch, the rows, and
        each attention's 1/sqrt(d_k)."""
        found = []
        for i, case in enumerate(self._cases()):
            m = self._module(case, "float64", seed=100 + i)
            shape = case.args("float64")[0].shape
            scales = generic.shape_scales(shape)
            sizes = {}
            for sub in [m, *vars(m).values()]:
                d_k = getattr(sub, "d_k", None)
                if isinstance(d_k, int):
                    scales["1/sqrt(d_k)"] = 1.0 / d_k**0.5
                    sizes.setdefault("d_k", float(d_k))
                if isinstance(getattr(sub, "h", None), int):
                    sizes.setdefault("H (the heads)", float(sub.h))
            sizes.update({k: v for k, v in generic.shape_sizes(shape).items() if k not in sizes})
            found.append({"scales": scales, "sizes": sizes, "ids": None})
        return found

    def _named(self, ret, m: Module, before: dict) -> dict:
        fn = self.methods[0].name
        if isinstance(ret, list):
            raise LearnerError(
                f"{fn} returned a list: return an array, or a tuple of them "
                f"({', '.join(self.inputs)})"
            )
        got = tuple(ret) if isinstance(ret, tuple) else (ret,)
        if len(got) != len(self.inputs):
            want = ", ".join(self.inputs)
            raise LearnerError(
                f"{fn} returned {len(got)} value(s); expected {len(self.inputs)}: ({want})"
            )
        out = {}
        for name, g in zip(self.inputs, got):
            if not backend.is_array(g):
                raise LearnerError(f"{fn} returned a {type(g).__name__} for {name}, not an array")
            out[name] = g
        for name, g in m.gradients().items():
            if not backend.is_array(g) or g.shape != before[name].shape:
                raise LearnerError(
                    f"self.grads of {name} is no longer an array of shape "
                    f"{before[name].shape}: add into it (+=)"
                )
            out[name] = g - before[name]  # what the backward added
        return out

    def numeric(self, code: dict) -> list:
        found = []
        doing = " / ".join(self.functions)
        for i, case in enumerate(self._cases()):
            m = self._module(case, "float64", seed=100 + i)
            kwargs = {} if case.dropout_seed is None else {"rng": case.dropout_seed}
            # a drawn case is there for its shapes: a few entries of each tensor suffice
            # (every entry of the designed ones is checked), and keep check under 2 s
            entries = DRAWN_ENTRIES if case.label.startswith(DRAWN) else None
            with (
                swapped(self._methods(code)),
                drawn_case(case.label),
                learner_code(self._path(code), doing),
            ):
                report = check_module(
                    m, *case.args("float64"), tol=TOL, max_entries=entries, **kwargs
                )
            for row, name in zip(report.rows, self.inputs):  # the inputs come first
                row.name = name
            found.append((case.label, report))
        return found

    # -- training with it -----------------------------------------------------------------
    @contextlib.contextmanager
    def plug(self, code: dict):
        with swapped(self._methods(code)):
            yield


def method_mistake(name: str, says: str, hint: str, **code) -> Mistake:
    """A mistake of a layer exercise: ``code`` maps function names to wrong methods."""
    return Mistake(name, says, hint, code)


def add(module, name: str, g, assign: bool = False) -> None:
    """``module.grads[name] += g`` (or, a mistake, ``= g``)."""
    if assign:
        module.grads[name] = g
    else:
        module.grads[name] += g


class AddNormBlock(Module):
    """Add & Norm around a linear sub-layer, the way every layer uses it:
    ``y = exit(x, Linear(enter(x)))``, post-LN ``LN(x + Dropout(x W + b))`` or pre-LN
    ``x + Dropout(LN(x) W + b)``. The module the Add & Norm exercise is checked on."""

    def __init__(self, d_model: int, P_drop: float, norm_first: bool, rng=None):
        super().__init__()
        self.norm = AddNorm(d_model, P_drop, norm_first)
        self.sublayer = Linear(d_model, d_model, rng=rng)

    def forward(self, x, rng=None):
        s_in, c_in = self.norm.enter(x)
        s, c_s = self.sublayer.forward(s_in)
        y, c_out = self.norm.exit(x, s, rng)
        return y, (c_in, c_s, c_out)

    def backward(self, dy, cache):
        c_in, c_s, c_out = cache
        dx, ds = self.norm.exit_backward(dy, c_out)
        return dx + self.norm.enter_backward(self.sublayer.backward(ds, c_s), c_in)


__all__ = [
    "AddNormBlock",
    "LayerCase",
    "LayerExercise",
    "Method",
    "add",
    "method_mistake",
    "swapped",
]
