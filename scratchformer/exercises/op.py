"""Op exercises: write the backward pass of one op of scratchformer/engine/ops/.

The learner's file holds the op's forward as the engine has it, and the backward to
write, with the engine's name and signature (``layernorm_backward(dout, cache)``). It is
graded by ``gradcheck.check_op`` on every input of the exercise: the engine's forward,
the learner's backward, float64 central differences of ``sum(out * dout)``.

While a model trains with it (``exercise train``), the learner's backward is registered
in the op's table (scratchformer/engine/dispatch.py) as an implementation whose forward is the
reference's, and put in place with ``dispatch.use``: every module that calls the op runs
the learner's backward.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.engine import backend, device, dispatch
from scratchformer.engine.gradcheck import check_op
from scratchformer.engine.ops.cases import Case, Seed
from scratchformer.exercises import generic
from scratchformer.exercises.guard import guarded
from scratchformer.exercises.spec import (
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

#: the name of a learner's implementation in a kernel table
LEARNER = "learner"


def _repo_path(fn: Callable) -> str:
    """``scratchformer/engine/ops/layernorm.py`` for a function of that file."""
    path = Path(inspect.getsourcefile(fn)).resolve()
    parts = path.parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("scratchformer") :])


@dataclass
class OpExercise(Exercise):
    name: str
    title: str
    summary: str
    section: str
    table: str  # the kernel table the op is called through
    forward: Callable  # the engine's forward
    backward: Callable  # the engine's backward: the learner writes one of the same name
    signature: str  # "layernorm_backward(dout, cache)"
    docstring: str  # the docstring of the function to write: shapes, cache, what to return
    intro: str  # what the op does, a paragraph of the file's docstring
    imports: str  # the file's import lines
    cases: Callable  # cases(r, dtype) -> [Case]
    given: tuple = ()  # the forward's helpers shown after it
    solution: tuple = ()  # the backward's helpers the solution needs besides it
    hints: tuple = ()
    mistakes: tuple = ()
    gradients: tuple = ()  # names of what the backward returns, in order
    uses: Callable = field(default=lambda model: "")  # where a model calls the op
    # the forward the finite differences are taken of, when it differs from ``forward``
    # (the embedding: the padding row is a constant of the model, never trained)
    graded_forward: Callable | None = None
    # drawn(r, dtype) -> [Case]: inputs of shapes drawn afresh each run (draw.py)
    drawn: Callable | None = None
    kind: str = "op"

    @property
    def functions(self) -> tuple:
        return (self.backward.__name__,)

    def engine(self) -> dict:
        return {self.backward.__name__: self.backward}

    def used_by(self, model) -> str:
        return self.uses(model)

    # -- the learner's file ---------------------------------------------------------------
    def _parts(self) -> tuple[str, list, list]:
        """The file's imports, the given functions (the forward and what it calls), and
        the engine's backward with what it calls: each name the code reads resolves."""
        given = [self.forward, *self.given]
        imports, helpers = needs(self.imports, given)
        given += helpers
        header = "\n".join([self.imports.strip(), *imports])
        mine = [self.backward, *self.solution]
        more, helpers = needs(header, mine, {f.__name__ for f in given})
        return "\n".join([header, *more]), given, mine + helpers

    def _head(self, imports: str) -> str:
        labels = "".join(f"\n    {label}" for label in self.case_labels())
        name, fn = self.name, self.backward.__name__
        return (
            f'"""Exercise {name}: the backward pass of {self.title}. Write ``{fn}`` below.\n\n'
            f"{self.intro.strip()}\n\n"
            f"    scratchformer exercise check {name}      grade it\n"
            f"    scratchformer exercise hint {name}       the next hint\n"
            f"    scratchformer exercise solution {name}   the engine's code and derivation\n\n"
            f"The derivation: {self.link()}.\n"
            f"The forward is given as the engine has it ({_repo_path(self.forward)}); the\n"
            "checker runs the engine's forward and compares your backward with float64\n"
            f"central differences of sum(out * dout) on these inputs:{labels}\n\n"
            "``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.\n"
            '"""\n\n'
            f"from __future__ import annotations\n\n{imports}\n\n"
            f'EXERCISE = "{name}"\n\n\n'
        )

    @staticmethod
    def _given(given: list) -> str:
        parts = [source(f) for f in given]
        return f"{rule('given: the forward pass, as in the engine')}\n" + "\n\n".join(parts)

    def file_text(self) -> str:
        imports, given, _ = self._parts()
        body = stub(self.signature, self.docstring, self.backward.__name__)
        return (
            f"{self._head(imports)}{self._given(given)}\n\n"
            f"{rule('yours: the backward pass')}\n{body}"
        )

    def solution_text(self) -> str:
        imports, given, mine = self._parts()
        return (
            f"{self._head(imports)}{self._given(given)}\n\n"
            f"{rule('the engine: the backward pass')}\n" + "\n\n".join(source(f) for f in mine)
        )

    # -- running code on the inputs -------------------------------------------------------
    def case_labels(self) -> list[str]:
        return [c.label for c in self._cases("float64")]

    def _cases(self, dtype: str) -> list[Case]:
        """The designed inputs, then (while ``drawing``) those drawn from the run's seed."""
        found = self.cases(backend.host_rng(0), dtype)
        seed = draw_seed()
        if seed is not None and self.drawn is not None:
            found += self.drawn(backend.host_rng(seed), dtype)
        return found

    def _make(self, backward, case: Case, i: int, dtype: str):
        """``() -> (inputs, call)``: the engine's forward on fresh copies of the inputs,
        then ``call()`` runs ``backward`` on what it kept (``inputs``: dout and the cache,
        which the backward must only read)."""

        def make():
            args = [copy.deepcopy(a) if backend.is_array(a) else a for a in case.args]
            kwargs = {
                k: device.generator(v.n) if isinstance(v, Seed) else v
                for k, v in case.kwargs.items()
            }
            out, cache = self.forward(*args, **kwargs)
            shape = getattr(out, "shape", ())
            r = backend.host_rng(1000 + i)
            dout = backend.asarray(r.standard_normal(shape), dtype=dtype)
            return {"dout": dout, "cache": cache}, lambda: backward(dout, cache)

        return make

    def facts(self) -> list[dict]:
        """Per input, the scales and ids the generic diagnoses name (generic.py)."""
        found = []
        for i, case in enumerate(self._cases("float64")):
            inputs, _ = self._make(self.backward, case, i, "float64")()
            fact = generic.cache_facts(inputs["cache"])
            fact["scales"].update(generic.shape_scales(inputs["dout"].shape))
            for k, v in generic.shape_sizes(inputs["dout"].shape).items():
                fact["sizes"].setdefault(k, v)
            found.append(fact)
        return found

    def _expected(self, dtype: str) -> list[tuple]:
        """Which gradients the engine returns per input (None where an input is absent)."""
        found = []
        for i, case in enumerate(self._cases(dtype)):
            ret = self._make(self.backward, case, i, dtype)()[1]()
            found.append(ret if isinstance(ret, tuple) else (ret,))
        return found

    def outputs(self, code: dict, dtype: str = "float64", limit: int | None = None) -> list:
        fn_name = self.backward.__name__
        fn = code[fn_name]
        path = file_of(fn)
        expected = self._expected(dtype)
        results = []
        for i, case in enumerate(self._cases(dtype)[:limit]):
            with drawn_case(case.label):
                ret = guarded(self._make(fn, case, i, dtype), path, fn_name)
                results.append(self._named(ret, expected[i], fn_name))
        return results

    def _named(self, ret, expected: tuple, fn_name: str) -> dict:
        """``{gradient name: array}`` from what a backward returned, checked for kind."""
        if isinstance(ret, list):
            raise LearnerError(
                f"{fn_name} returned a list: return an array, or a tuple of them "
                f"(({', '.join(self.gradients[: len(expected)])}))"
            )
        got = tuple(ret) if isinstance(ret, tuple) else (ret,)
        names = self.gradients
        if len(got) != len(expected):
            want = ", ".join(names)
            raise LearnerError(
                f"{fn_name} returned {len(got)} value(s); expected {len(expected)}: ({want})"
            )
        out = {}
        for name, g, want in zip(names, got, expected):
            if want is None:
                if g is not None:
                    raise LearnerError(
                        f"{fn_name} returned a {name} for an input the forward did not have "
                        "(read the docstring: None there)"
                    )
                continue
            if g is None:
                raise LearnerError(f"{fn_name} returned None for {name}")
            if not backend.is_array(g):
                raise LearnerError(
                    f"{fn_name} returned a {type(g).__name__} for {name}, not an array"
                )
            out[name] = g
        return out

    def numeric(self, code: dict) -> list:
        fn_name = self.backward.__name__
        fn = code[fn_name]
        path = file_of(fn)
        found = []
        for case in self._cases("float64"):
            kwargs = {k: v.n if isinstance(v, Seed) else v for k, v in case.kwargs.items()}
            with drawn_case(case.label), learner_code(path, fn_name):
                report = check_op(
                    self.graded_forward or self.forward,
                    fn,
                    *case.args,
                    tol=TOL,
                    max_entries=None,
                    **kwargs,
                )
            for row in report.rows:
                row.name = "d" + row.name
            found.append((case.label, report))
        return found

    # -- training with it -----------------------------------------------------------------
    @contextlib.contextmanager
    def plug(self, code: dict):
        with plugged(self.table, code[self.backward.__name__]):
            yield


@contextlib.contextmanager
def plugged(table_name: str, backward: Callable):
    """A learner's ``backward`` in place in the op's table ``table_name``, the reference's
    forward beside it, while the context is open."""
    table = dispatch.table(table_name)
    table.register(LEARNER, table.reference.forward, backward,
                   note="a learner's backward (exercise)", accessors=table.reference.accessors)
    try:
        with dispatch.use(table, LEARNER):
            yield
    finally:
        table.unregister(LEARNER)


#: the import line of an exercise whose code uses ``xp``
XP_IMPORT = "from scratchformer.engine.backend import xp"


def with_cases(kernel_cases, *extra):
    """The parity cases of an op, then ``extra(r, dtype) -> [Case]``."""

    def cases(r, dtype):
        found = list(kernel_cases(r, dtype))
        for more in extra:
            found += more(r, dtype)
        return found

    return cases


def randn(r, shape, dtype):
    """A standard normal array of the active backend, drawn from the host generator r."""
    return backend.asarray(r.standard_normal(shape), dtype=dtype)


def mistake(name: str, says: str, hint: str, fn: Callable, backward: Callable) -> Mistake:
    """A mistake of an op exercise: ``fn`` in place of ``backward``."""
    return Mistake(name, says, hint, {backward.__name__: fn})


__all__ = ["LEARNER", "XP_IMPORT", "OpExercise", "mistake", "plugged", "randn", "with_cases"]
