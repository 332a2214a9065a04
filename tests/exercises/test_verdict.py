"""``exercise train``'s verdict sees what the model at its initialisation hides, checks
float32 against the float64 truth, and stops a pass slow at the model's sizes; the run
stops, in one line naming the learner's file, on a NaN a pass returns.

The verdict's tests here take a smaller batch than the default run's (``SMALL``); the
whole command is in the slow ones at the end."""

from __future__ import annotations

import pytest

from scratchformer.app.cli import main
from scratchformer.app.train.config import build
from scratchformer.engine import backend
from scratchformer.exercises import EXERCISES, files, training, verdict

SMALL = {"task": {"train_size": 300, "valid_size": 20, "test_size": 20},
         "train": {"max_tokens": 128, "checkpoint_every": 0}}

GAMMA = ("    dxhat = dout * gamma  # (..., D)", "    dxhat = dout  # (..., D)")
NAN32 = ("    dxhat = dout * gamma  # (..., D)",
         "    tiny = xp.asarray(1e-46, dtype=dout.dtype)  # 0 in float32: 0/0 is NaN there\n"
         "    dxhat = dout * gamma * (tiny / tiny)")
#: a right layer norm written as each row's Jacobian, entry by entry: instant on the
#: check's rows of a few entries, seconds a call on the model's (rows of 64, 1000 rows)
SLOW = '''\
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    xh, r = xhat.reshape(-1, D), rstd.reshape(-1)
    g = (dout * gamma).reshape(-1, D)
    dx = xp.zeros_like(xh)
    for n in range(xh.shape[0]):
        for i in range(D):
            s = 0.0
            for j in range(D):
                s += g[n, j] * r[n] * ((i == j) - 1.0 / D - xh[n, i] * xh[n, j] / D)
            dx[n, i] = s
    return (dx.reshape(dout.shape), (dout * xhat).reshape(-1, D).sum(0),
            dout.reshape(-1, D).sum(0))
'''


def layernorm_file(folder, change=None, body=None):
    """exercises/layernorm.py in ``folder``: the solution with ``change`` (old, new), or
    the stub with ``body``."""
    ex = EXERCISES["layernorm"]
    folder.mkdir(exist_ok=True)
    if body is not None:
        stub = '    raise NotImplementedError("layernorm_backward: not written yet")\n'
        text = ex.file_text().replace(stub, body)
    else:
        text = ex.solution_text()
        assert change[0] in text
        text = text.replace(*change)
    path = folder / "layernorm.py"
    path.write_text(text)
    return path


def judge(folder, failing=(), limit=None, model=None):
    """``training.judged`` of every file of ``folder`` (those of ``failing`` failing)."""
    cfg = build([(SMALL, "test"), ({"name": "x", "run_dir": str(folder / "runs" / "x")}, "t")])
    b, drawn, _ = verdict.batch_and_model(cfg)
    texts = {p.stem: (p, files.read(p)) for p in sorted(folder.glob("*.py"))}
    return training.judged(folder, texts, b, drawn if model is None else model,
                           {n: texts[n][0] for n in failing}, limit)


def test_every_parameter_is_drawn_away_from_its_initial_value():
    cfg = build([(SMALL, "test"), ({"name": "x", "run_dir": "/nonexistent/x"}, "t")])
    _, model, config = verdict.batch_and_model(cfg)
    np = backend.np
    for name, p in model.parameters().items():
        p = backend.asnumpy(p)
        if name.endswith("gamma"):
            assert np.all(p != 1.0) and p.std() > 0.1, name
        elif p.ndim == 1:  # betas, biases
            assert np.all(p != 0.0) and p.std() > 0.1, name
    E = backend.asnumpy(model.parameters()["embed.E"])
    assert np.all(E[config.pad_id] == 0.0)  # the padding row, a constant of the model
    assert np.all(np.delete(E, config.pad_id, axis=0) != 0.0)


def test_a_layer_norm_wrong_only_through_gamma_is_named(tmp_path, monkeypatch):
    """``dout`` where ``dout * gamma`` belongs: right at initialisation (gamma = 1),
    wrong once gamma is drawn away."""
    layernorm_file(tmp_path, GAMMA)
    v = judge(tmp_path, failing=["layernorm"])
    assert not v["agree"] and v["blamed"] == ["layernorm"] and not v["float32"], v
    assert v["count"] > 50
    monkeypatch.setattr(verdict, "drawn_away", lambda model: model)
    v = judge(tmp_path, failing=["layernorm"])
    assert v["agree"] and v["unreached"] == ["layernorm"]  # what the model at init hid


def test_a_pass_nan_only_in_float32_fails_the_verdict_in_float32(tmp_path):
    layernorm_file(tmp_path, NAN32)
    v = judge(tmp_path, failing=["layernorm"])
    assert not v["agree"] and v["float32"] and v["blamed"] == ["layernorm"], v
    lines = verdict.lines(v)
    assert "in float32 (dropout off, Adam's update counted as one) differ from the float64 " \
        "truth" in lines[0]
    assert lines[1].endswith("NaN or inf")


def test_a_pass_slow_at_the_models_sizes_is_stopped_and_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    layernorm_file(tmp_path / "exercises", body=SLOW)
    v = judge(tmp_path / "exercises", limit=1.0)
    assert not v["agree"] and v["stopped"] == "layernorm"
    assert v["error"] == (
        "exercises/layernorm.py: layernorm_backward ran past the time limit of 1 s in one of "
        "the whole model's gradients, and was stopped: slow at the model's sizes, or an "
        "endless loop? --time-limit gives it more")


def test_the_slow_pass_is_named_when_the_learners_layer_calls_it(tmp_path, monkeypatch):
    """The learner's Add & Norm calls their layer norm in their process: the time is the
    Add & Norm's, the function running when it is stopped is the layer norm."""
    monkeypatch.chdir(tmp_path)
    layernorm_file(tmp_path / "exercises", body=SLOW)
    ex = EXERCISES["add_norm"]
    (tmp_path / "exercises" / "add_norm.py").write_text(ex.solution_text())
    v = judge(tmp_path / "exercises", limit=1.0)
    assert v["stopped"] == "layernorm", v
    assert v["error"].startswith(
        "exercises/layernorm.py: layernorm_backward ran past the time limit of 1 s in one of "
        "the whole model's gradients, called by your add_norm, and was stopped"), v["error"]


def test_a_nan_in_the_run_stops_it_in_one_line_naming_the_file(tmp_path, monkeypatch):
    """The demonstration run (float32) with a pass NaN there: the line names the learner's
    file, the function and the step."""
    monkeypatch.chdir(tmp_path)
    path = layernorm_file(tmp_path / "exercises", NAN32)
    cfg = build([(SMALL, "test"), ({"train": {"steps": 1}}, "steps"),
                 ({"name": "yours", "run_dir": str(tmp_path / "exercises/runs/yours")}, "t")])
    said = []
    got = training.demonstration(cfg, tmp_path / "exercises",
                                 {"layernorm": (path, files.read(path))}, False, said.append, 10.0)
    assert got == ("exercises/layernorm.py: layernorm_backward returned NaN or inf at step 1 of "
                   "your run, on finite inputs (float32: a constant that underflows or "
                   "overflows there?)"), said
    assert f"your run stopped: {got}" in said


def test_a_call_past_the_time_limit_stops_the_run_in_one_line(tmp_path, monkeypatch):
    """Each call of the learner's code in the run gets the time limit: an endless loop
    is stopped at its first call, the line names the file, the function, the step."""
    monkeypatch.chdir(tmp_path)
    path = layernorm_file(tmp_path / "exercises", body="    while True:\n        pass\n")
    cfg = build([(SMALL, "test"), ({"train": {"steps": 1}}, "steps"),
                 ({"name": "yours", "run_dir": str(tmp_path / "exercises/runs/yours")}, "t")])
    said = []
    got = training.demonstration(cfg, tmp_path / "exercises",
                                 {"layernorm": (path, files.read(path))}, False, said.append, 0.5)
    assert got == ("exercises/layernorm.py: layernorm_backward ran past the time limit of 0.5 s "
                   "in one call, at step 1 of your run, and was stopped: slow at the model's "
                   "sizes? --time-limit gives it more"), said


# -- the whole command -----------------------------------------------------------------------
CLI_SMALL = ["--set", "task.train_size=300", "--set", "task.valid_size=20",
             "--set", "task.test_size=20", "--set", "train.checkpoint_every=0"]


def _train(tmp_path, monkeypatch, capsys, *extra):
    monkeypatch.chdir(tmp_path)
    code = main(["exercise", "train", "--steps", "2", "--no-progress", *CLI_SMALL, *extra])
    return code, capsys.readouterr().out


@pytest.mark.slow
def test_train_names_a_layer_norm_wrong_through_gamma(tmp_path, monkeypatch, capsys):
    layernorm_file(tmp_path / "exercises", GAMMA)
    code, out = _train(tmp_path, monkeypatch, capsys)
    assert code == 1, out
    assert "what makes them differ, plugged in alone: layernorm (its check fails too" in out
    assert out.rstrip().endswith("(see the verdict above)")


@pytest.mark.slow
def test_train_names_a_pass_nan_only_in_float32(tmp_path, monkeypatch, capsys):
    layernorm_file(tmp_path / "exercises", NAN32)
    code, out = _train(tmp_path, monkeypatch, capsys)
    assert code == 1, out
    assert "layernorm: failing: on float32 inputs dx holds NaN or inf" in out
    assert "in float32 (dropout off" in out and "NaN or inf\n" in out
    assert "what makes them differ, plugged in alone: layernorm" in out
    assert "Traceback" not in out


@pytest.mark.slow
def test_train_stops_a_pass_slow_at_the_models_sizes(tmp_path, monkeypatch, capsys):
    layernorm_file(tmp_path / "exercises", body=SLOW)
    code, out = _train(tmp_path, monkeypatch, capsys, "--time-limit", "3")
    assert code == 1, out
    assert "passing: layernorm" in out
    assert ("verdict: your code stopped the check of the whole model: exercises/layernorm.py: "
            "layernorm_backward ran past the time limit of 3 s") in out
    assert "layernorm stopped the verdict: your run uses the engine's in its place" in out
