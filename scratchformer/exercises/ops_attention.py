"""The attention op exercise: scaled dot-product attention, in its two steps (the
attention core, and the paper's logits); Shaw's relative logits and the Music
Transformer's skew follow in ops_relative.py.

The attention exercise asks for the backward of the two pieces every attention of the
engine is built from, ``attention_core_backward`` and ``dot_product_logits_backward``,
and grades them together through ``attention_backward`` (given), and once with a term
of the output that reads the weights again (as Shaw's value term does: the core's
``dA_drop``). In training they go into the ``attention_core`` and ``dot_product_logits``
tables, so the learner's core runs in every attention variant.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from typing import NamedTuple

from scratchformer.engine import backend, device
from scratchformer.engine.backend import host_rng
from scratchformer.engine.gradcheck import check_op
from scratchformer.engine.ops import attention as att
from scratchformer.engine.ops import dropout, softmax
from scratchformer.engine.ops.cases import Case, Seed, mask, qkv, randn
from scratchformer.exercises import draw, generic
from scratchformer.exercises.guard import guarded
from scratchformer.exercises.op import OpExercise, mistake, plugged
from scratchformer.exercises.spec import (
    TOL,
    draw_seed,
    drawn_case,
    learner_code,
    needs,
    rule,
    source,
    stub,
)


# -- scaled dot-product attention --------------------------------------------------------
class ValueTermCache(NamedTuple):
    attention: object  # the attention's cache (an AttentionCache)
    W: object  # (S, Dv) the value term's matrix


def attention_with_value_term_forward(Q, K, V, W, mask=None, p_drop: float = 0.0, rng=None):
    """Attention with a term of the output that reads the weights A' again, as Shaw's
    relative values do: ``O = A' V + A' W``, W (S, Dv) shared by the heads."""
    O, cache = att.attention_forward(Q, K, V, mask, p_drop, rng)
    return O + cache.core.A_drop @ W, ValueTermCache(cache, W)


def composed(core_backward, logits_backward):
    """The attention backwards made of a core and a logits backward: ``attention_backward``
    (the engine's ops/attention.py, which the learner's file gives) and the value term's."""

    def attention_backward(dO, cache):
        dZ, dV = core_backward(dO, cache.core)
        dQ, dK = logits_backward(dZ, cache.logits)
        return dQ, dK, dV

    def value_term_backward(dO, cache):
        c = cache.attention
        dW = (c.core.A_drop.swapaxes(-1, -2) @ dO).sum(axis=(0, 1))  # (S, Dv)
        dZ, dV = core_backward(dO, c.core, dO @ cache.W.T)
        dQ, dK = logits_backward(dZ, c.logits)
        return dQ, dK, dV, dW

    return attention_backward, value_term_backward


def _attention_cases(r, dtype):
    Q, K, V = qkv(r, dtype)
    m = mask(r, (2, 1, 5, 7))
    return [
        Case("masked, an empty row", (Q, K, V, m)),
        Case("dropout 0.25", (Q, K, V, m, 0.25), {"rng": Seed(9)}),
        Case("no mask", (Q, K, V)),
    ]


def _value_term_cases(r, dtype):
    Q, K, V = qkv(r, dtype)
    W = randn(r, (7, 6), dtype)
    return [
        Case("a value term reading A' (dA_drop), dropout 0.25",
             (Q, K, V, W, mask(r, (2, 1, 5, 7)), 0.25), {"rng": Seed(4)}),
    ]


def _core(dO, cache, dA_drop=None, *, dV_before_dropout=False, dropout_backward=True,
          row_sum=True, dV_transposed=False, value_term=True):
    """The engine's core backward with one step changed (the mistakes)."""
    P = cache.softmax.P
    dA = dO @ cache.V.swapaxes(-1, -2)  # (B, H, T, S)
    if dA_drop is not None and value_term:
        dA = dA + dA_drop
    A = P if dV_before_dropout else cache.A_drop
    dV = dO.swapaxes(-1, -2) @ A if dV_transposed else A.swapaxes(-1, -2) @ dO
    if dropout_backward:
        dA = dropout.dropout_backward(dA, cache.dropout)
    dZ = softmax.softmax_backward(dA, cache.softmax) if row_sum else dA * P
    return dZ, dV


def _logits(dZ, cache, *, dK_transposed=False, scale=True):
    """The engine's logits backward with one step changed (the mistakes)."""
    if scale:
        dZ = dZ * cache.scale
    dQ = dZ @ cache.K
    dK = cache.Q.swapaxes(-1, -2) @ dZ if dK_transposed else dZ.swapaxes(-1, -2) @ cache.Q
    return dQ, dK


_ATTENTION_IMPORTS = """\
import math

from scratchformer.engine.backend import xp
from scratchformer.engine.ops.attention import (
    AttentionCache,
    AttentionCoreCache,
    DotProductLogitsCache,
)
from scratchformer.engine.ops.dropout import dropout
from scratchformer.engine.ops.softmax import softmax"""

_CORE_DOC = """\
The attention core's backward: ``O = A' V`` with ``A' = dropout(A)``, ``A = softmax(Z)``.

dO (B, H, T, Dv): the gradient of the loss with respect to ``O``.
dA_drop (B, H, T, S) or None: a gradient of ``A'`` from elsewhere (a variant whose
    output reads A' again, as Shaw's value term does): add it to what ``O = A' V``
    gives ``A'``. None for plain attention.

cache (an AttentionCoreCache), what the core's forward kept:
    cache.softmax.P      (B, H, T, S)   A = softmax(Z, mask): masked entries are 0
    cache.A_drop         (B, H, T, S)   A' = dropout(A), what multiplied V (A itself
                                        when dropout was off)
    cache.dropout.mask   (B, H, T, S) bool, or None when dropout was off
    cache.dropout.scale  float          1 / (1 - p)
    cache.V              (B, H, S, Dv)  the values

Return ``(dZ, dV)``: dZ (B, H, T, S) like the logits, dV (B, H, S, Dv). Nothing sums
over B or H: each (b, h) is its own attention. T, S, Dh and Dv all differ here."""

_LOGITS_DOC = """\
The paper's logits' backward: ``Z = s Q K^T``, ``s = 1 / sqrt(d_k)``.

dZ (B, H, T, S): the gradient of the loss with respect to the logits ``Z``.

cache (a DotProductLogitsCache):
    cache.Q      (B, H, T, Dh)  the queries
    cache.K      (B, H, S, Dh)  the keys
    cache.scale  float          1 / sqrt(d_k)

Return ``(dQ, dK)`` like Q and K."""


class AttentionExercise(OpExercise):
    """Two functions, graded together through the given composition."""

    @property
    def functions(self) -> tuple:
        return ("attention_core_backward", "dot_product_logits_backward")

    def engine(self) -> dict:
        return {
            "attention_core_backward": att.attention_core_backward,
            "dot_product_logits_backward": att.dot_product_logits_backward,
        }

    # -- the file -------------------------------------------------------------------------
    def _parts(self) -> tuple[str, list, list]:
        given = [att.attention_forward, att.dot_product_logits_forward,
                 att.attention_core_forward, att.attention_backward,
                 attention_with_value_term_forward]
        header = "\n".join([_ATTENTION_IMPORTS, "from typing import NamedTuple"])
        mine = [att.attention_core_backward, att.dot_product_logits_backward]
        imports, helpers = needs(header, given + mine, {"ValueTermCache", "att"})
        return "\n".join([header, *imports]), given, mine + helpers

    def _given(self, given: list) -> str:
        parts = [source(f) for f in given[:4]]
        parts.append(inspect.getsource(ValueTermCache).rstrip() + "\n")
        parts.append(source(given[4]).replace("att.attention_forward", "attention_forward"))
        title = "given: the forward pass and how your two backward passes compose"
        return f"{rule(title)}\n" + "\n\n".join(parts)

    def file_text(self) -> str:
        imports, given, _ = self._parts()
        core = stub("attention_core_backward(dO, cache, dA_drop=None)", _CORE_DOC,
                    "attention_core_backward")
        logits = stub("dot_product_logits_backward(dZ, cache)", _LOGITS_DOC,
                      "dot_product_logits_backward")
        return (
            f"{self._head(imports)}{self._given(given)}\n\n"
            f"{rule('yours: the two backward passes')}\n{core}\n\n{logits}"
        )

    def solution_text(self) -> str:
        imports, given, mine = self._parts()
        return (
            f"{self._head(imports)}{self._given(given)}\n\n"
            f"{rule('the engine: the two backward passes')}\n"
            + "\n\n".join(source(f) for f in mine)
        )

    # -- running it -----------------------------------------------------------------------
    def _kinds(self, dtype: str) -> list:
        """``[(case, forward, which backward)]``: the attention's cases, then the value term's."""
        r = backend.host_rng(0)
        found = [(c, att.attention_forward, 0) for c in _attention_cases(r, dtype)]
        found += [(c, attention_with_value_term_forward, 1) for c in _value_term_cases(r, dtype)]
        seed = draw_seed()
        if seed is not None:
            found += [(c, att.attention_forward, 0) for c in draw.attention(host_rng(seed), dtype)]
        return found

    def _cases(self, dtype: str) -> list[Case]:
        return [c for c, _, _ in self._kinds(dtype)]

    def facts(self) -> list[dict]:
        found = []
        for case, forward, _ in self._kinds("float64"):
            kwargs = {k: device.generator(v.n) if isinstance(v, Seed) else v
                      for k, v in case.kwargs.items()}
            out, cache = forward(*case.args, **kwargs)
            fact = generic.cache_facts(cache)
            fact["scales"].update(generic.shape_scales(out.shape))
            for k, v in generic.shape_sizes(out.shape).items():
                fact["sizes"].setdefault(k, v)
            found.append(fact)
        return found

    def _backward(self, code: dict, which: int):
        return composed(code["attention_core_backward"], code["dot_product_logits_backward"])[which]

    def _run(self, code: dict, dtype: str, limit=None, path=None) -> list:
        found = []
        for i, (case, forward, which) in enumerate(self._kinds(dtype)[:limit]):

            def make(case=case, forward=forward, which=which, i=i):
                args = [copy.deepcopy(a) if backend.is_array(a) else a for a in case.args]
                kwargs = {k: device.generator(v.n) if isinstance(v, Seed) else v
                          for k, v in case.kwargs.items()}
                out, cache = forward(*args, **kwargs)
                r = backend.host_rng(1000 + i)
                dout = backend.asarray(r.standard_normal(out.shape), dtype=dtype)
                return {"dO": dout, "cache": cache}, lambda: self._backward(code, which)(
                    dout, cache
                )

            with drawn_case(case.label):
                ret = guarded(make, path, "attention_core_backward / dot_product_logits_backward")
            found.append(ret if isinstance(ret, tuple) else (ret,))
        return found

    def outputs(self, code: dict, dtype: str = "float64", limit: int | None = None) -> list:
        fn = code["attention_core_backward"]
        path = getattr(getattr(fn, "__code__", None), "co_filename", None)
        expected = self._run(self.engine(), dtype, limit)
        got = self._run(code, dtype, limit, path)
        return [self._named(g, e, "your attention backward") for g, e in zip(got, expected)]

    def numeric(self, code: dict) -> list:
        fn = code["attention_core_backward"]
        path = getattr(getattr(fn, "__code__", None), "co_filename", None)
        found = []
        for case, forward, which in self._kinds("float64"):
            kwargs = {k: v.n if isinstance(v, Seed) else v for k, v in case.kwargs.items()}
            doing = "attention_core_backward / dot_product_logits_backward"
            with drawn_case(case.label), learner_code(path, doing):
                report = check_op(forward, self._backward(code, which), *case.args,
                                  tol=TOL, max_entries=None, **kwargs)
            for row in report.rows:
                row.name = "d" + row.name
            found.append((case.label, report))
        return found

    @contextlib.contextmanager
    def plug(self, code: dict):
        with (
            plugged("attention_core", code["attention_core_backward"]),
            plugged("dot_product_logits", code["dot_product_logits_backward"]),
        ):
            yield


def _core_mistake(name, says, hint, **wrong):
    return mistake(name, says, hint, lambda dO, c, dA_drop=None: _core(dO, c, dA_drop, **wrong),
                   att.attention_core_backward)


def _logits_mistake(name, says, hint, **wrong):
    return mistake(name, says, hint, lambda dZ, c: _logits(dZ, c, **wrong),
                   att.dot_product_logits_backward)


ATTENTION = AttentionExercise(
    name="attention",
    title="scaled dot-product attention",
    summary="its two pieces: the core dropout(softmax(Z)) V, and the logits Q K^T / sqrt(d_k)",
    section="scaled-dot-product-attention",
    table="attention_core",
    forward=att.attention_forward,
    backward=att.attention_backward,
    signature="attention_backward(dO, cache)",
    intro="""\
Section 3.2.1 of the paper, batched over examples and heads, with a mask (padding, or
the decoder's causal mask) and attention dropout, in the two steps every attention of
the engine is made of:

    logits:  Z = Q K^T / sqrt(d_k)
    core:    A = softmax(Z, mask)      A' = dropout(A)      O = A' V

Write both backward passes: ``attention_core_backward`` (the product with V, dropout,
the softmax) and ``dot_product_logits_backward``. They are graded together through
``attention_backward`` below, and once with a term of the output that reads A' again
(the core's ``dA_drop``, as Shaw's relative values do). In training, your core runs in
every attention: dense, relative, local and memory-efficient.""",
    docstring="",
    imports=_ATTENTION_IMPORTS,
    cases=_attention_cases,
    gradients=("dQ", "dK", "dV", "dW"),
    hints=(
        "Go through the forward backwards, one step at a time: O = A' V first. Its "
        "gradients are dA' = dO V^T (plus dA_drop when given) and dV = A'^T dO (check "
        "the shapes).",
        "A' = dropout(A): the mask of the cache, scaled, as in the dropout exercise. "
        "A = softmax(Z): the softmax exercise's dZ = A * (dA - rowsum(dA * A)).",
        "Z = s Q K^T, s = 1/sqrt(d_k): dQ = s dZ K. For dK, write Z[t, u] = s sum_d "
        "Q[t, d] K[u, d] and see which index of dZ is summed.",
    ),
    mistakes=(
        _logits_mistake(
            "transposed-dK",
            "a transposed dK: Q^T dZ, of shape (Dh, S) instead of K's (S, Dh)",
            "in Z = s Q K^T each key meets every query: dK sums over the queries, which "
            "index the rows of dZ, and has K's shape (S, Dh) "
            "(docs/derivations.md#scaled-dot-product-attention)",
            dK_transposed=True,
        ),
        _logits_mistake(
            "no-scale",
            "the 1/sqrt(d_k) missing from dQ and dK",
            "the logits are scaled: Z = s Q K^T, so dZ is multiplied by s on its way to Q "
            "and K (docs/derivations.md#scaled-dot-product-attention)",
            scale=False,
        ),
        _core_mistake(
            "dV-before-dropout",
            "dV taken with the weights before dropout (A instead of A')",
            "V was multiplied by A' = dropout(A): dV = A'^T dO "
            "(docs/derivations.md#the-attention-core)",
            dV_before_dropout=True,
        ),
        _core_mistake(
            "dropout-not-applied",
            "attention dropout not applied in backward",
            "A' = dropout(A): dA = dA' * mask / (1 - p) before the softmax "
            "(docs/derivations.md#the-attention-core)",
            dropout_backward=False,
        ),
        _core_mistake(
            "softmax-no-row-sum",
            "softmax backward without the row sum",
            "each A[t, u] depends on every Z[t, :]: the softmax's backward subtracts a "
            "row sum (docs/derivations.md#softmax)",
            row_sum=False,
        ),
        _core_mistake(
            "transposed-dV",
            "a transposed dV: dO^T A', of shape (Dv, S) instead of V's (S, Dv)",
            "O = A' V: dV = A'^T dO, summing over the queries "
            "(docs/derivations.md#the-attention-core)",
            dV_transposed=True,
        ),
        _core_mistake(
            "dA_drop-ignored",
            "the core's dA_drop left out (a value term's gradient of A')",
            "when the output reads A' again, A' gets a second gradient, dA_drop: add it to "
            "dO V^T before dropout's and the softmax's backward "
            "(docs/derivations.md#the-attention-core)",
            value_term=False,
        ),
    ),
    uses=lambda model: "every attention head: encoder and decoder self-attention, cross-attention",
)


__all__ = ["ATTENTION", "AttentionExercise", "composed"]
