"""``scratchformer exercise train``: the one training loop with the learner's backward
passes, compared with the engine's run.

With every exercise's reference solution in the folder, the learner's run is the
engine's to rounding (the solutions are the plain formulas, the engine runs the seam's
faster forms of them); afterwards the engine is the engine again (no implementation or
method of a learner is left in place).
"""

from __future__ import annotations

import pytest

from scratchformer.app.cli import main
from scratchformer.engine import dispatch
from scratchformer.engine.nn.attention import MultiHeadAttention
from scratchformer.engine.nn.layers import AddNorm, PositionwiseFeedForward
from scratchformer.engine.nn.transformer import DecoderLayer, EncoderLayer, SelfAttentionLayer
from scratchformer.engine.optim.adam import Adam
from scratchformer.exercises import EXERCISES
from scratchformer.exercises.op import LEARNER

SMALL = [
    "--set", "task.train_size=300", "--set", "task.valid_size=20",
    "--set", "task.test_size=20", "--set", "train.checkpoint_every=0",
]


def engine_methods() -> dict:
    return {
        (cls, name): cls.__dict__.get(name)
        for cls, name in [
            (MultiHeadAttention, "backward"),
            (PositionwiseFeedForward, "backward"),
            (AddNorm, "exit_backward"),
            (AddNorm, "enter_backward"),
            (SelfAttentionLayer, "backward"),
            (EncoderLayer, "backward"),
            (DecoderLayer, "backward"),
            (Adam, "step"),
        ]
    }


def test_reference_solutions_train_like_the_engine(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "exercises"
    folder.mkdir()
    for ex in EXERCISES.values():
        (folder / f"{ex.name}.py").write_text(ex.solution_text())
    before = engine_methods()

    code = main(
        ["exercise", "train", "--steps", "3", "--no-progress", "--time-limit", "600", *SMALL]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"passing: {', '.join(EXERCISES)}" in out
    for name in ("layernorm", "attention", "multi_head_attention", "decoder_layer", "adam"):
        assert f"\n  {name} " in out  # said to be the learner's in this run
    assert "passing, but not used by this model: gelu, softmax, shaw, skew" in out
    assert "verdict: with your backward passes, every one of the 61 parameter gradients" in out
    assert "final parameters: equal to the engine's run within rounding" in out
    assert "held-out exact match" in out and "A run of 3 steps shows nothing either way" in out

    assert engine_methods() == before
    assert all(LEARNER not in table.entries for table in dispatch.TABLES.values())
    written = {p.relative_to(tmp_path).parts[:3] for p in tmp_path.rglob("*") if p.is_file()}
    assert {w[:2] for w in written} == {("exercises",) + (w[1],) for w in written}
    assert {w[2] for w in written if len(w) > 2 and w[1] == "runs"} == {"yours", "engine"}


def test_nothing_to_train_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["exercise", "start", "relu"])
    code = main(["exercise", "train", "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        "scratchformer exercise: error: no exercise in exercises passes yet: "
        "'scratchformer exercise check' says why"
    )
    assert not (tmp_path / "exercises" / "runs").exists()


TEXTBOOK = {
    "layernorm": {
        "layernorm_backward": """\
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    dxhat = dout * gamma
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, (dout * xhat).reshape(-1, D).sum(0), dout.reshape(-1, D).sum(0)
""",
    },
    "attention": {
        "attention_core_backward": """\
    P = cache.softmax.P
    dA = dO @ cache.V.swapaxes(-1, -2)
    if dA_drop is not None:
        dA = dA + dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO
    if cache.dropout.mask is not None:
        dA = dA * cache.dropout.mask * cache.dropout.scale
    return P * (dA - (dA * P).sum(axis=-1, keepdims=True)), dV
""",
        "dot_product_logits_backward": """\
    Q, K, s = cache
    return s * dZ @ K, s * dZ.swapaxes(-1, -2) @ Q
""",
    },
}


@pytest.mark.slow
def test_a_learners_own_layernorm_and_attention_train_as_well_as_the_engine(
    tmp_path, monkeypatch, capsys
):
    """The default run, 3,000 steps, with a learner's own layer norm and attention
    (the same math in another order: not bitwise equal): the verdict agrees, and the
    demonstration runs to its end."""
    monkeypatch.chdir(tmp_path)
    for name, bodies in TEXTBOOK.items():
        main(["exercise", "start", name])
        path = tmp_path / "exercises" / f"{name}.py"
        text = path.read_text()
        for function, body in bodies.items():
            stub = f'    raise NotImplementedError("{function}: not written yet")\n'
            assert stub in text, function
            text = text.replace(stub, body)
        path.write_text(text)
    capsys.readouterr()
    code = main(["exercise", "train", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verdict: with your backward passes, every one of" in out
    assert "held-out exact match" in out and "final parameters:" in out


def _train_with_one_wrong(tmp_path, monkeypatch, capsys, name, right, wrong, also=None):
    """``exercise train`` (2 steps) on every solution, ``name``'s with ``right`` replaced
    by ``wrong`` (and ``also``: ``{name: (text, replacement)}`` more changes that keep a
    pass right): ``(exit status, output)``."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "exercises"
    folder.mkdir()
    changes = {name: (right, wrong), **(also or {})}
    for ex in EXERCISES.values():
        text = ex.solution_text()
        if ex.name in changes:
            old, new = changes[ex.name]
            assert old in text
            text = text.replace(old, new)
        (folder / f"{ex.name}.py").write_text(text)
    code = main(["exercise", "train", "--steps", "2", "--no-progress", *SMALL])
    return code, capsys.readouterr().out


@pytest.mark.slow
def test_one_wrong_pass_is_named_by_the_verdict_and_decides_the_status(
    tmp_path, monkeypatch, capsys
):
    """Every solution, and one layer norm with the unbiased variance's 1/(D-1): the
    verdict (the whole model's gradients on one batch) names it, and the status is 1."""
    code, out = _train_with_one_wrong(
        tmp_path, monkeypatch, capsys, "layernorm", "xhat * mean_dxhat_xhat)",
        "xhat * mean_dxhat_xhat * 8 / 7)",
    )
    assert code == 1, out
    assert "what makes them differ, plugged in alone: layernorm (its check fails too" in out
    assert "A run of 2 steps shows nothing either way" in out


@pytest.mark.slow
def test_a_failing_pass_the_model_does_not_call_is_said_to_be_out_of_reach(
    tmp_path, monkeypatch, capsys
):
    """Every solution, the learner's attention core among them written to compute its
    own softmax backward (the engine's calls the softmax's table), and a softmax with the
    Jacobian's diagonal only: the model's gradients are right, so the status is 0, and
    the verdict says the failing softmax does not reach them."""
    own_softmax = ("dZ = (dA - (dA * cache.softmax.P).sum(axis=-1, keepdims=True)) "
                   "* cache.softmax.P")
    code, out = _train_with_one_wrong(
        tmp_path, monkeypatch, capsys, "softmax",
        "return (dout - (dout * P).sum(axis=-1, keepdims=True)) * P", "return dout * P * (1 - P)",
        also={"attention": ("dZ = softmax.backward(dA, cache.softmax)", own_softmax)},
    )
    assert code == 0, out
    assert "though softmax fails its check: no error reaches the model's gradients here" in out
