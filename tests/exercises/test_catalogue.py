"""Every exercise's reference solution passes, and every catalogued mistake is diagnosed
as itself and never as another.

A solution is the file ``exercise start`` writes with the engine's own code in place of
the body to fill in (``Exercise.solution_text``); a planted mistake is the exercise's
functions with one replaced by the mistake's wrong version, graded as a learner's file.
"""

from __future__ import annotations

import pytest

from scratchformer.exercises import EXERCISES
from scratchformer.exercises.grade import FAILING, PASSING, grade, report
from scratchformer.exercises.spec import MATCH_TOL

MISTAKES = [(ex.name, m.name) for ex in EXERCISES.values() for m in ex.mistakes]


def solution(ex) -> dict:
    """The functions of the exercise's solution file, compiled as a learner's would be."""
    namespace: dict = {"__name__": f"solution_{ex.name}"}
    exec(compile(ex.solution_text(), f"<solution {ex.name}>", "exec"), namespace)
    return {f: namespace[f] for f in ex.functions}


def blank(ex) -> dict:
    namespace: dict = {"__name__": f"blank_{ex.name}"}
    exec(compile(ex.file_text(), f"<blank {ex.name}>", "exec"), namespace)
    return {f: namespace[f] for f in ex.functions}


def test_the_catalogue_covers_the_issue():
    """The exercises in teaching order, and the classic mistakes each names."""
    assert list(EXERCISES)[:2] == ["linear", "relu"] and list(EXERCISES)[-1] == "adam"
    expected = {
        ("attention", "transposed-dK"),
        ("attention", "no-scale"),
        ("layernorm", "no-variance"),
        ("softmax", "no-row-sum"),
        ("dropout", "not-applied"),
        ("cross_entropy", "eps-over-V"),
        ("linear", "db-one-example"),
        ("adam", "bias-correction-late"),
        ("adam", "bias-correction-early"),
    }
    assert expected <= set(MISTAKES)
    assert all(ex.hints and ex.mistakes for ex in EXERCISES.values())


@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_reference_solution_passes(name):
    ex = EXERCISES[name]
    g = grade(ex, solution(ex))
    assert g.status == PASSING, "\n".join(report(g))
    assert g.rows and all(err < 1e-8 for _, err, _ in g.rows), g.rows
    assert not g.diagnosis


@pytest.mark.parametrize("name", list(EXERCISES))
def test_a_blank_file_is_not_written_yet(name):
    ex = EXERCISES[name]
    g = grade(ex, blank(ex))
    assert g.status == "not written"
    verb = "is" if len(ex.functions) == 1 else "are"
    names = " and ".join(ex.functions)
    assert g.message == f"{names} {verb} not written yet (raises NotImplementedError)"


@pytest.mark.parametrize("name, mistake", MISTAKES)
def test_each_mistake_is_diagnosed_as_itself(name, mistake):
    """Planted in a solution, a mistake is named, alone (the finite differences are the
    slow test's: the diagnosis needs only the results)."""
    ex = EXERCISES[name]
    m = ex.mistake(mistake)
    g = grade(ex, {**solution(ex), **m.code}, numeric=False)
    assert g.status == FAILING
    assert [(d.name, parts) for d, parts in g.diagnosis] == [(mistake, None)]
    text = "\n".join(report(g))
    assert f"recognised: {m.says}" in " ".join(text.split())
    assert m.hint.endswith(")") and "docs/derivations.md#" in m.hint


def test_mistakes_are_distinct_and_never_the_engine():
    """No two mistakes of an exercise give the same results, and none gives the
    engine's: each is visible on the exercise's inputs."""
    from scratchformer.exercises.grade import _all_same  # noqa: PLC0415

    for ex in EXERCISES.values():
        ref = ex.outputs(ex.engine())
        results = {m.name: ex.outputs(ex.with_code(m.code)) for m in ex.mistakes}
        for a, out in results.items():
            assert not _all_same(out, ref), (ex.name, a)
            for b, other in results.items():
                assert a == b or not _all_same(out, other), (ex.name, a, b)
    assert MATCH_TOL < 1e-6  # a match is rounding apart, far below the grader's tolerance


def test_a_wrong_gradient_among_right_ones_names_the_mistake_of_that_gradient():
    """Two things wrong: dx without the variance term and dbeta averaged. No mistake
    matches the whole; the one whose dx equals the learner's is named for dx."""
    ex = EXERCISES["layernorm"]
    wrong_dx = ex.mistake("no-variance").code["layernorm_backward"]

    def backward(dout, cache):
        dx, dgamma, dbeta = wrong_dx(dout, cache)
        return dx, dgamma, dbeta / 3.0

    g = grade(ex, {"layernorm_backward": backward})
    assert g.status == FAILING
    # dbeta off by a constant factor (read off the numbers), dx the catalogued mistake
    found = [(d.name, parts) for d, parts in g.diagnosis]
    assert found == [("generic:factor", ["dbeta"]), ("no-variance", ["dx"])]
    assert {name for name, _, ok in g.rows if not ok} == {"dx", "dbeta"}
    text = "\n".join(report(g))
    assert "recognised (your dx): layer norm without its variance term" in text
    assert "dbeta is wrong at" in text


@pytest.mark.slow
@pytest.mark.parametrize("name, mistake", MISTAKES)
def test_each_mistake_fails_the_finite_difference_check_or_the_accumulation(name, mistake):
    """The whole check, as ``exercise check`` runs it: the verdict is FAILED and the
    mistake named (a layer's overwritten gradients pass the finite differences, from
    zero gradients, and fail the accumulation)."""
    ex = EXERCISES[name]
    g = grade(ex, {**solution(ex), **ex.mistake(mistake).code})
    assert g.status == FAILING
    # the catalogue names it alone; what the numbers say on their own may come first
    assert [d.name for d, _ in g.diagnosis if not d.name.startswith("generic:")] == [mistake]
    assert g.message or not all(ok for _, _, ok in g.rows)
