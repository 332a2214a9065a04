"""float32 in ``check``: a pass must give float32 results, finite, within float32's
tolerance of the truth; a float64 result names a NumPy float64 scalar when the file
has one. And the drawn inputs keep the shapes a stub promises (the embedding's ids
(B, T)); a catalogued mistake is named only when all it gets wrong matches."""

from __future__ import annotations

import textwrap

import pytest

from scratchformer.engine import backend
from scratchformer.exercises import EXERCISES, draw, precision
from scratchformer.exercises.grade import FAILING, PASSING, grade, report
from scratchformer.exercises.spec import drawing


def solution(ex) -> dict:
    namespace: dict = {"__name__": f"solution_{ex.name}"}
    exec(compile(ex.solution_text(), f"<solution {ex.name}>", "exec"), namespace)
    return {f: namespace[f] for f in ex.functions}


def _file(tmp_path, name: str, old: str, new: str, head: str = "") -> tuple[dict, str, str]:
    """The exercise's solution file with ``old`` replaced by ``new`` (and ``head`` after
    its first import line), compiled from the file as a learner's is:
    ``(functions, path, text)``."""
    ex = EXERCISES[name]
    text = ex.solution_text()
    assert old in text
    text = text.replace(old, new)
    if head:
        text = text.replace("from __future__ import annotations\n",
                            f"from __future__ import annotations\n{head}", 1)
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    namespace: dict = {"__name__": f"exercise_{name}"}
    exec(compile(text, str(path), "exec"), namespace)
    return {f: namespace[f] for f in ex.functions}, str(path), text


@pytest.mark.parametrize("name", list(EXERCISES))
def test_every_solution_is_right_in_float32_on_drawn_inputs_too(name):
    ex = EXERCISES[name]
    code = solution(ex)
    with drawing(11):
        ref = ex.outputs(ex.engine())
        assert precision.problem(ex, code, ref) == ""


def test_a_pass_nan_only_in_float32_fails_its_check(tmp_path):
    """1e-46 is 0 in float32: 0/0 is NaN there, 1 in float64."""
    code, path, text = _file(
        tmp_path, "layernorm", "    dxhat = dout * gamma",
        "    tiny = xp.asarray(1e-46, dtype=dout.dtype)\n    dxhat = dout * gamma * (tiny / tiny)")
    g = grade(EXERCISES["layernorm"], code, path, text=text)
    assert g.status == FAILING
    assert g.message.startswith("on float32 inputs dx holds NaN or inf (input: "), g.message


def test_a_float32_only_branch_is_off_by_its_size(tmp_path):
    code, path, text = _file(
        tmp_path, "relu", "    return dout * cache.positive",
        "    dx = dout * cache.positive\n    return dx * 1.01 if dx.dtype == xp.float32 else dx")
    g = grade(EXERCISES["relu"], code, path, text=text)
    assert g.status == FAILING
    assert g.message.startswith("on float32 inputs dx is off by 1.0e-02 (relative; float32's "
                                "tolerance 1e-04"), g.message


def test_a_right_gelu_with_numpys_constant_is_told_the_float64_scalar(tmp_path):
    code, path, text = _file(
        tmp_path, "gelu", "    du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)",
        "    du_dx = np.sqrt(2 / np.pi) * (1.0 + 3.0 * _GELU_A * x * x)", "\nimport numpy as np\n")
    g = grade(EXERCISES["gelu"], code, path, text=text)
    assert g.status == FAILING
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "np.sqrt(2 / np.pi)" in x)
    assert g.message.startswith(
        f"on float32 inputs dx is float64: {path}, line {line}: np.sqrt(2 / np.pi) is a NumPy "
        "float64 scalar"), g.message
    assert "math.sqrt(2 / math.pi)" in g.message
    assert "make new arrays" not in g.message
    # the same numbers with a Python float pass
    code, path, text = _file(
        tmp_path, "gelu", "    du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)",
        "    du_dx = math.sqrt(2 / math.pi) * (1.0 + 3.0 * _GELU_A * x * x)")
    assert grade(EXERCISES["gelu"], code, path, text=text).status == PASSING


def test_a_new_float64_array_is_told_to_take_the_inputs_dtype(tmp_path):
    code, path, text = _file(tmp_path, "relu", "    return dout * cache.positive",
                             "    return xp.zeros(dout.shape) + dout * cache.positive")
    g = grade(EXERCISES["relu"], code, path, text=text)
    assert g.message.startswith("on float32 inputs dx is float64: make new arrays in the inputs' "
                                "dtype"), g.message


def test_float64_scalars_are_calls_of_numpy_on_constants_in_the_learners_code():
    text = textwrap.dedent("""\
        import math
        import numpy as numpy_
        from scratchformer.engine.backend import xp

        C = numpy_.sqrt(2 / numpy_.pi)

        def given_forward(x):
            return xp.sqrt(2.0) * x

        def relu_backward(dout, cache):
            a = xp.float64(0.5) * dout
            b = xp.float32(0.5) * dout
            c = xp.zeros(dout.shape) + xp.asarray(1.0, dtype=dout.dtype)
            return a + b + c + math.sqrt(2) + xp.exp(-math.pi)
        """)
    found = precision.float64_scalars(text, ["relu_backward"])
    assert found == [(5, "numpy_.sqrt(2 / numpy_.pi)"), (11, "xp.float64(0.5)"),
                     (14, "xp.exp(-math.pi)")]


def test_the_embeddings_drawn_ids_are_b_by_t_as_its_stub_promises(tmp_path):
    """A right pass that loops over ``B, T, D = dout.shape`` passes on every seed."""
    for seed in range(40):
        with drawing(seed):
            cases = EXERCISES["embedding"]._cases("float64")
        assert all(c.args[0].ndim == 2 for c in cases), seed
        assert draw.embedding(backend.host_rng(seed), "float64")[0].args[0].shape[0] == 1
    body = """\
    ids, V, pad_id = cache
    B, T, D = dout.shape
    dE = xp.zeros((V, D), dtype=dout.dtype)
    for b in range(B):
        for t in range(T):
            if ids[b, t] != pad_id:
                dE[ids[b, t]] += dout[b, t]
    return dE
"""
    ex = EXERCISES["embedding"]
    text = ex.file_text()
    stub = '    raise NotImplementedError("embedding_backward: not written yet")\n'
    path = tmp_path / "embedding.py"
    path.write_text(text.replace(stub, body))
    namespace: dict = {"__name__": "exercise_embedding"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    for seed in (1, 2, 3, 7):
        g = grade(ex, {"embedding_backward": namespace["embedding_backward"]}, str(path),
                  seed=seed)
        assert g.status == PASSING, "\n".join(report(g))


def test_an_encoder_layer_that_adds_dx_kv_is_not_told_it_uses_the_queries_only(tmp_path):
    """dx_kv added past the norm's enter_backward: the norm's gradients are those of
    "the queries only" (pre-LN), its dx is not: not that mistake."""
    code, path, text = _file(
        tmp_path, "encoder_layer",
        "    return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)",
        "    return dx_res + self.self_attn_norm.enter_backward(da_q, c.enter) + da_kv")
    g = grade(EXERCISES["encoder_layer"], code, path, text=text, seed=7)
    assert g.status == FAILING
    assert "query-path-only" not in [m.name for m, _ in g.diagnosis]
    assert "queries only" not in "\n".join(report(g))
    assert "float32" not in g.message  # wrong in float64: said by the finite differences
    # the mistake itself is still named
    code, path, text = _file(
        tmp_path, "encoder_layer", "enter_backward(da_q + da_kv, c.enter)",
        "enter_backward(da_q, c.enter)")
    g = grade(EXERCISES["encoder_layer"], code, path, text=text, seed=7)
    assert "query-path-only" in [m.name for m, _ in g.diagnosis]
