"""Directional gradient checks: ``check_directions`` and ``scratchformer gradcheck
--directions``. The ``base``-size checks are slow."""

from __future__ import annotations

import pytest

from scratchformer.app.cli import main
from scratchformer.app.commands.gradcheck import demo_batch
from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.gradcheck import check_directions
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.ops.attention import attention_core_backward


def _model(preset: str, **overrides):
    cfg = TransformerConfig.preset(preset, vocab_size=23, seed=0, **overrides)
    batch = (backend.asarray(a) for a in demo_batch(23, 0))
    return Transformer(cfg), *batch


def _layernorm_without_the_xhat_term(dout, cache):
    """The classic layer-norm bug: ``dx = rstd * (dxhat - mean(dxhat))``, the
    ``xhat * mean(dxhat * xhat)`` term (the path through the variance) left out."""
    xhat, rstd, gamma = cache
    dxhat = dout * gamma
    dx = (dxhat - dxhat.mean(axis=-1, keepdims=True)) * rstd
    d = xhat.shape[-1]
    return dx, (dout * xhat).reshape(-1, d).sum(0), dout.reshape(-1, d).sum(0)


def _softmax_backward_off_by_1e4(dO, cache, dA_drop=None):
    """The attention core's backward with the softmax's gradient scaled by 1 + 1e-4: an
    error no loss curve shows."""
    dZ, dV = attention_core_backward(dO, cache, dA_drop)
    return dZ * (1 + 1e-4), dV


@pytest.mark.slow
def test_small_passes_in_float64_with_relu_and_gelu():
    for activation in ("relu", "gelu"):
        model, src, tgt_in, tgt_out = _model("small", N=2, activation=activation)
        report = check_directions(model, src, tgt_in, tgt_out, rng=1)
        assert report.passed, report.table()
        assert report.max_rel_error < 1e-6
        assert len(report.rows) == len(model.parameters()) + 1
        assert report.rows[-1].name == "all parameters"


def test_the_model_is_not_changed():
    model, src, tgt_in, tgt_out = _model("tiny")
    before = {k: v.copy() for k, v in model.parameters().items()}
    check_directions(model, src, tgt_in, tgt_out, rng=1, directions=2)
    for k, v in model.parameters().items():
        assert v.dtype == xp.float32 and bool((v == before[k]).all()), k


def test_a_broken_layernorm_backward_is_caught_and_named(plant):
    plant("layernorm", _layernorm_without_the_xhat_term)
    model, src, tgt_in, tgt_out = _model("small", N=2)
    names = ["encoder.layers.0.self_attn.W_q", "decoder.layers.1.ffn_norm.gamma"]
    report = check_directions(model, src, tgt_in, tgt_out, rng=1, names=names)
    failed = {r.name for r in report.failures()}
    assert failed == {"encoder.layers.0.self_attn.W_q", "all parameters"}, report.table()
    assert report["encoder.layers.0.self_attn.W_q"].redrawn == 2  # it failed every time
    assert report.max_rel_error > 1e-3


@pytest.mark.slow
def test_base_passes_in_float64():
    model, src, tgt_in, tgt_out = _model("base")
    report = check_directions(model, src, tgt_in, tgt_out, rng=1)
    assert report.passed, report.table()
    assert len(report.rows) == len(model.parameters()) + 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "op, broken",
    [
        ("layernorm", _layernorm_without_the_xhat_term),
        ("attention_core", _softmax_backward_off_by_1e4),
    ],
)
def test_a_broken_backward_is_caught_at_base_size(plant, op, broken):
    """At base size (6+6 layers, d_model 512), a backward that is wrong by a missing term,
    or by a factor of 1 + 1e-4 in one op, fails the attention weights' rows."""
    plant(op, broken)
    model, src, tgt_in, tgt_out = _model("base")
    names = ["encoder.layers.0.self_attn.W_q", "decoder.layers.5.cross_attn.W_k"]
    report = check_directions(model, src, tgt_in, tgt_out, rng=1, names=names)
    assert {r.name for r in report.failures()} == {*names, "all parameters"}, report.table()


def test_cli_directional_check_passes_and_prints_the_table(capsys):
    assert main(["gradcheck", "--directions", "1", "--norm", "pre"]) == 0
    out = capsys.readouterr().out
    assert "1 direction(s) per tensor" in out and "all parameters" in out
    assert "gradcheck: PASSED" in out


def test_cli_step_sweep_prints_one_line_per_step(capsys):
    argv = ["gradcheck", "--directions", "1", "--norm", "post", "--dtype", "float32"]
    main([*argv, "--h", "1e-2", "1e-3"])
    out = capsys.readouterr().out
    assert "float32" in out and "largest rel err" in out
    assert sum(line.strip().startswith(("1e-02", "1e-03")) for line in out.splitlines()) == 2


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--dtype", "float32"], "add --directions"),
        (["--h", "1e-3", "1e-4"], "add --directions"),
        (["--directions", "1", "--explain", "embed.E"], "leave out --directions"),
    ],
)
def test_cli_refuses_options_that_do_not_go_together(capsys, argv, words):
    assert main(["gradcheck", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "Traceback" not in err[0]
