"""What the grader holds against a backward pass besides its numbers: the inputs it was
given to read are unchanged afterwards, and it works on shapes drawn afresh each run."""

from __future__ import annotations

import textwrap

import pytest

from scratchformer.engine.gradcheck import check_module
from scratchformer.engine.nn.layers import Linear
from scratchformer.exercises import EXERCISES
from scratchformer.exercises.grade import BROKEN, FAILING, PASSING, grade, report
from scratchformer.exercises.spec import drawing


def solution(ex) -> dict:
    namespace: dict = {"__name__": f"solution_{ex.name}"}
    exec(compile(ex.solution_text(), f"<solution {ex.name}>", "exec"), namespace)
    return {f: namespace[f] for f in ex.functions}


def learner(tmp_path, name: str, text: str) -> tuple[dict, str]:
    """The functions of a learner's file holding ``text``, compiled from the file."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    namespace: dict = {"__name__": f"exercise_{name}"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    ex = EXERCISES[name]
    return {f: namespace[f] for f in ex.functions}, str(path)


DROPOUT_IN_PLACE = """\
    def dropout_backward(dout, cache):
        if cache.mask is None:
            return dout
        dout *= cache.mask
        dout *= cache.scale
        return dout
"""

LINEAR_ZEROES_X = """\
    def linear_backward(dout, cache):
        x, W = cache.x, cache.W
        D, E = x.shape[-1], dout.shape[-1]
        dW = x.reshape(-1, D).T @ dout.reshape(-1, E)
        db = dout.reshape(-1, E).sum(0) if cache.has_bias else None
        x[...] = 0.0
        return dout @ W.T, dW, db
"""

LINEAR_FIXED_SHAPE = """\
    def linear_backward(dout, cache):
        x, W = cache.x, cache.W
        x2, d2 = x.reshape(6, 5), dout.reshape(6, -1)
        db = d2.sum(0) if cache.has_bias else None
        return dout @ W.T, x2.T @ d2, db
"""


def test_a_backward_that_writes_into_dout_fails_naming_it_and_its_line(tmp_path):
    code, path = learner(tmp_path, "dropout", DROPOUT_IN_PLACE)
    g = grade(EXERCISES["dropout"], code)
    assert g.status == FAILING
    assert "dropout_backward changed dout" in g.message and f"{path}, line 4" in g.message


def test_a_backward_that_writes_into_its_cache_fails_naming_the_field(tmp_path):
    code, path = learner(tmp_path, "linear", LINEAR_ZEROES_X)
    g = grade(EXERCISES["linear"], code)
    assert g.status == FAILING and "changed cache.x" in g.message and "line 6" in g.message


def test_a_layer_that_adds_into_the_gradient_it_was_given_fails(tmp_path):
    """Pre-LN's exit_backward returns dout itself: ``dx += ...`` then writes into dout."""
    code, _ = learner(tmp_path, "encoder_layer", """\
        def encoder_layer_backward(self, dout, cache):
            c = cache.ffn
            dx, df = self.ffn_norm.exit_backward(dout, c.exit)
            dx += self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
            c = cache.self_attn
            dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
            da_q, da_kv = self.self_attn.backward(da, c.sublayer)
            return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)
    """)
    g = grade(EXERCISES["encoder_layer"], code)
    assert g.status == FAILING and "changed dout" in g.message and "line 4" in g.message


def test_the_finite_differences_never_see_what_a_backward_did_to_its_inputs():
    """A module whose backward writes into dout: the numeric column is the true one."""

    class Spoiler(Linear):
        def backward(self, dout, cache):
            dx = super().backward(dout, cache)
            dout[...] = 0.0
            for p in self.parameters().values():
                p[...] = 0.0
            return dx

    from scratchformer.engine import backend

    m = Spoiler(3, 2, rng=backend.host_rng(0))
    x = backend.asarray(backend.host_rng(1).standard_normal((2, 4, 3)))
    assert check_module(m, x).passed


def test_a_shape_written_into_the_code_fails_on_the_drawn_inputs(tmp_path):
    code, path = learner(tmp_path, "linear", LINEAR_FIXED_SHAPE)
    ex = EXERCISES["linear"]
    assert grade(ex, code).status == PASSING  # the designed inputs alone: (2, 3, 5)
    g = grade(ex, code, seed=3)
    assert g.status == BROKEN
    assert (
        f"{path}, line 3" in g.message and "on the input x (" in g.message and "seed 3" in g.message
    )


@pytest.mark.parametrize("name", [n for n, ex in EXERCISES.items() if ex.kind != "layer"])
def test_the_solutions_pass_on_drawn_shapes(name):
    ex = EXERCISES[name]
    for seed in range(4):
        g = grade(ex, solution(ex), seed=seed)
        assert g.status == PASSING, "\n".join(report(g))


def test_the_drawn_inputs_cover_batch_one_and_more_in_two_and_three_dimensions():
    ex = EXERCISES["linear"]
    seen = set()
    for seed in range(20):
        with drawing(seed):
            for case in ex._cases("float64")[2:]:
                x = case.args[0]
                seen.add((x.ndim, x.shape[0] == 1))
    assert {(2, True), (3, True)} & seen and {(2, False), (3, False)} & seen
    assert len(seen) >= 3


@pytest.mark.parametrize(
    "body, expected",
    [
        ("    exit()\n", "your code called exit() (exercises/relu.py, line "),
        ("    import os\n    os._exit(3)\n", "ended (exit status 3) before it returned"),
        ("    while True:\n        pass\n", "ran past the time limit of 1 s and was stopped"),
        ("    import os, signal\n    os.kill(os.getpid(), signal.SIGTERM)\n", "killed by SIGTERM"),
    ],
    ids=["exit", "os._exit", "endless loop", "signal"],
)
def test_learner_code_never_ends_the_command(tmp_path, monkeypatch, capsys, body, expected):
    """check says what happened and goes on with the next file; list lists them all."""
    from scratchformer.app.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["exercise", "start", "relu"]) == 0
    assert main(["exercise", "start", "gelu"]) == 0
    path = tmp_path / "exercises" / "relu.py"
    stub = '    raise NotImplementedError("relu_backward: not written yet")\n'
    path.write_text(path.read_text().replace(stub, body))
    capsys.readouterr()
    assert main(["exercise", "check", "--time-limit", "1"]) == 1
    out = capsys.readouterr().out
    assert f"  broken: {expected}" in out or expected in out, out
    assert "gelu: GELU" in out and "not written yet" in out  # the next file was checked
    assert main(["exercise", "list", "--time-limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "relu" in out and "broken" in out and "of 17 exercises passing" in out


@pytest.mark.parametrize("name", list(EXERCISES))
def test_no_shortcut_is_seen_in_the_files_start_and_solution_write(name):
    from scratchformer.exercises import shortcuts

    ex = EXERCISES[name]
    assert shortcuts.find(ex, ex.file_text(), f"{name}.py") == ""
    assert shortcuts.find(ex, ex.solution_text(), f"{name}.py") == ""


SHORTCUTS = [
    ("linear", "from scratchformer.engine.ops.linear import linear_backward as _engine\n",
     "    return _engine(dout, cache)\n", "imports the engine's own linear_backward"),
    ("linear", "from scratchformer.engine.ops.linear import linear\n",
     "    return linear.backward(dout, cache)\n", "calls the engine's linear.backward"),
    ("ffn", "from scratchformer.engine.nn.layers import PositionwiseFeedForward as F\nengine = F.backward\n",  # noqa: E501
     "    return engine(self, dout, cache)\n", "own PositionwiseFeedForward.backward"),  # noqa: E501
    ("relu", "", "    import torch\n    return dout\n", "imports torch, which differentiates"),
    ("relu", "",
     "    from scratchformer.engine.gradcheck import numeric_gradient\n    return dout\n",
     "imports the gradient checker"),
    ("relu", "", "    return (relu_forward(cache.positive + 1e-6)[0] - 0) * dout\n",
     "relu_backward calls the forward (relu_forward): finite differences"),
]


@pytest.mark.parametrize("name, head, body, says", SHORTCUTS)
def test_a_shortcut_passes_nothing_and_is_named(
    tmp_path, monkeypatch, capsys, name, head, body, says
):
    from scratchformer.app.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["exercise", "start", name]) == 0
    path = tmp_path / "exercises" / f"{name}.py"
    fn = EXERCISES[name].functions[0]
    text = path.read_text().replace(
        f'    raise NotImplementedError("{fn}: not written yet")\n', body
    )
    path.write_text(text.replace("EXERCISE = ", head + "EXERCISE = ", 1))
    capsys.readouterr()
    assert main(["exercise", "check", name]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert says in out and "proves nothing" in out and "FAILED" in out, out


def test_a_file_of_the_earlier_layout_is_told_how_to_call_the_ops_now(tmp_path, capsys):
    """A layer file started before the ops' tables moved into ops/ imports
    ``scratchformer.kernels``: its check says in its one line how the ops are called now."""
    from scratchformer.app.cli import main

    folder = tmp_path / "exercises"
    assert main(["exercise", "start", "ffn", "--dir", str(folder)]) == 0
    path = folder / "ffn.py"
    path.write_text(path.read_text().replace("from scratchformer.engine.ops.linear import linear",
                                             "from scratchformer import kernels"))
    capsys.readouterr()
    assert main(["exercise", "check", "ffn", "--dir", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "cannot import name 'kernels'" in out
    assert "from scratchformer.engine.ops.linear import linear" in out and "Traceback" not in out
