"""The dispatcher and the ops' files: one file per op family (the reference pairs, the
faster forms, the registration), the choice between implementations (by backend, dtype
and donation), opaque caches that go back to the implementation that made them,
composites whose references re-dispatch to their parts, explicit donation and the switch
that poisons donated inputs, the switch that forces the references, and the parity
harness that checks every registered implementation (and fails on a broken one).

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, Dv d_v.
"""

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scratchformer.engine.ops
from scratchformer.app.cli import main
from scratchformer.engine import backend as B
from scratchformer.engine import device, dispatch, parity
from scratchformer.engine.gradcheck import check_op
from scratchformer.engine.models import LanguageModel, Transformer, TransformerConfig
from scratchformer.engine.ops.activations import relu
from scratchformer.engine.ops.attention import attention_core, attention_core_backward
from scratchformer.engine.ops.linear import linear
from scratchformer.engine.ops.loss import cross_entropy
from scratchformer.engine.ops.tanh import tanh

OPS = Path(scratchformer.engine.ops.__file__).resolve().parent
#: forward/backward pairs of ops/ that are not tables: pieces of an op (re-indexings),
#: and dense attention, the composition of two tables (logits, then the core)
NOT_TABLES = {"skew", "window", "attention"}


def op_pairs():
    """``{name: file}`` of every ``<name>_forward`` with a ``<name>_backward`` in ops/ that
    is no table's faster form."""
    faster = {f.__name__ for t in dispatch.TABLES.values() for i in t.entries.values()
              for f in (i.forward, i.backward) if f is not t.reference.forward}
    found = {}
    for path in OPS.glob("*.py"):
        names = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
        for n in names:
            if n.endswith("_forward") and n[: -len("_forward")] + "_backward" in names:
                if n not in faster:
                    found[n[: -len("_forward")]] = path.stem
    return found


def test_every_op_has_a_table_whose_reference_is_the_op():
    for name, module in op_pairs().items():
        if name in NOT_TABLES:
            continue
        table = dispatch.table(name)
        assert table.reference.forward.__name__ == f"{name}_forward", name
        assert table.reference.forward.__module__ == f"scratchformer.engine.ops.{module}"
        assert table.reference.backward.__name__ == f"{name}_backward"
    for table in dispatch.TABLES.values():  # every table can be checked and is described
        assert table.cases is not None, table.name
        assert table.gradients, table.name


def test_one_file_per_op_family():
    """Every form of an op (the reference, its faster forms, its parity cases) lives in
    the op's file, which makes its table; the float16 form is the one shared module."""
    for name, table in dispatch.TABLES.items():
        home = table.reference.forward.__module__
        assert getattr(importlib.import_module(home), name) is table, name
        assert table.cases.__module__ in (home, "scratchformer.engine.ops.cases"), name
        for impl in table.entries.values():
            where = {f.__module__ for f in (impl.forward, impl.backward)}
            assert where <= {home, "scratchformer.engine.ops.float16"}, (name, impl.name, where)
    assert not (OPS.parent / "kernels").exists()


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_registered_implementation_equals_its_reference(dtype):
    """The harness on fresh random inputs (odd sizes, an empty query row, dropout), under
    the switch that poisons donated inputs: every row within its limit, the exact ones
    bitwise, and no input that was not given up changed."""
    rows = parity.check_all(dispatch.TABLES, (dtype,))
    assert rows, "no implementation besides the references is registered"
    bad = [r for r in rows if not r.passed]
    assert not bad, bad
    exact = [r for r in rows if r.limit == 0 and "unchanged" not in r.tensor]
    assert exact and all(r.error == 0 for r in exact)
    assert any("unchanged" in r.tensor for r in rows)
    tables = {r.table for r in rows}
    assert {"attention_core", "relu", "cross_entropy", "layernorm"} <= tables


def _core_without_the_row_sum(dO, cache, dA_drop=None):
    """The attention core's backward with a classic mistake: ``dZ = A * dA`` (the softmax
    backward's row sum left out)."""
    dA = dO @ cache.V.swapaxes(-1, -2)
    dV = cache.A_drop.swapaxes(-1, -2) @ dO
    if cache.dropout.mask is not None:
        dA = dA * cache.dropout.mask * cache.dropout.scale
    return dA * cache.softmax.P, dV


def _core_off_by_1e6(dO, cache, dA_drop=None):
    dZ, dV = attention_core_backward(dO, cache, dA_drop)
    return dZ * (1 + 1e-6), dV


@pytest.mark.parametrize("broken", [_core_without_the_row_sum, _core_off_by_1e6])
def test_a_deliberately_broken_implementation_fails_the_harness(plant, broken):
    """Registered beside the reference, a wrong backward is caught by the harness, in
    float64 even a factor of 1 + 1e-6 (below what finite differences resolve)."""
    impl = plant("attention_core", broken)
    rows = parity.check_implementation(dispatch.table("attention_core"), impl.name, "float64")
    failed = {r.tensor for r in rows if not r.passed}
    assert failed == {"dZ"}, rows  # the output and dV are right


def test_an_implementation_that_writes_into_an_input_it_was_not_given_fails(plant):
    """The harness compares every input that was not donated with its copy: a backward
    that scales ``dout`` in its buffer without declaring it is caught."""

    def scales_dout(dO, cache, dA_drop=None):
        dO *= 1.0
        dO += 0.0
        dO[...] = dO * 2  # writes into dO
        dZ, dV = attention_core_backward(dO / 2, cache, dA_drop)
        return dZ, dV

    impl = plant("attention_core", scales_dout)
    rows = parity.check_implementation(dispatch.table("attention_core"), impl.name, "float64")
    assert {r.tensor for r in rows if not r.passed} == {"dout unchanged"}


def test_a_broken_implementation_fails_the_op_gradient_check(plant):
    """The finite differences judge a registered implementation as they judge the
    reference: the missing row sum fails dZ."""
    impl = plant("attention_core", _core_without_the_row_sum)
    r = np.random.default_rng(0)
    Z, V = B.asarray(r.standard_normal((2, 3, 4, 5))), B.asarray(r.standard_normal((2, 3, 5, 3)))
    report = check_op(impl.forward, impl.backward, Z, V)
    assert [row.name for row in report.failures()] == ["Z"]


def _variant_models():
    """One small model per attention variant: dense, Shaw, the skew, local, blockwise."""
    base = dict(vocab_size=11, N=1, d_model=8, d_ff=12, h=2, P_drop=0.0, P_drop_attn=0.1)
    return {
        "dense": Transformer(TransformerConfig(**base)),
        "relative": Transformer(TransformerConfig(**base, attention="relative",
                                                  max_relative_position=2)),
        "relative_skew": LanguageModel(TransformerConfig(**base, attention="relative_skew",
                                                         max_relative_position=2)),
        "local": LanguageModel(TransformerConfig(**base, attention="local", local_block=2)),
        "blockwise": Transformer(TransformerConfig(**base, attention_block=2)),
    }


def _loss_and_backward(model):
    r = np.random.default_rng(0)
    ids = r.integers(3, 11, (2, 5))
    rng = device.generator(1)
    if isinstance(model, LanguageModel):
        loss, cache = model.loss_forward(ids, ids, rng=rng)
    else:
        loss, cache = model.loss_forward(ids, ids, ids, rng=rng)
    model.loss_backward(cache)
    return float(loss)


def test_one_core_registration_serves_every_attention_variant():
    """A core implementation registered once (and put in place) runs, forward and
    backward, in dense, Shaw's, the skew's, local and blockwise attention."""
    table = dispatch.table("attention_core")
    calls = {"forward": 0, "backward": 0}

    def forward(*a, **k):
        calls["forward"] += 1
        return table.reference.forward(*a, **k)

    def backward(*a, **k):
        calls["backward"] += 1
        return table.reference.backward(*a, **k)

    table.register("counting", forward, backward, accessors=table.reference.accessors)
    try:
        with dispatch.use("attention_core", "counting"):
            for kind, model in _variant_models().items():
                calls.update(forward=0, backward=0)
                _loss_and_backward(model)
                assert calls["forward"] > 0 and calls["backward"] > 0, kind
    finally:
        table.unregister("counting")


def test_a_part_put_in_place_is_reached_through_every_attention(plant):
    """A learner's softmax (any implementation put in place in the softmax table) puts
    the core's reference in place, which calls the softmax table, in every variant."""
    calls = []

    def softmax_backward(dout, cache):
        calls.append(dout.shape)
        return dispatch.table("softmax").reference.backward(dout, cache)

    plant("softmax", softmax_backward)
    assert dispatch.table("attention_core").chosen("float32").name == "reference"
    for kind, model in _variant_models().items():
        calls.clear()
        _loss_and_backward(model)
        assert calls, kind
    assert dispatch.table("add_norm_exit").chosen("float32").name == "fused"  # not a part


def test_a_part_of_add_and_norm_put_in_place_bypasses_the_fused_exit(plant):
    """A layer norm put in place (a learner's) is reached through every Add & Norm exit:
    the exit runs its reference, written through the dropout and layernorm tables."""
    calls = []

    def layernorm_backward(dout, cache):
        calls.append(dout.shape)
        return dispatch.table("layernorm").reference.backward(dout, cache)

    assert dispatch.table("add_norm_exit").chosen("float32").name == "fused"
    plant("layernorm", layernorm_backward)
    assert dispatch.table("add_norm_exit").chosen("float32").name == "reference"
    _loss_and_backward(_variant_models()["dense"])
    assert len(calls) >= 4  # the encoder's and decoder's exits, post-LN


def test_a_cache_goes_back_to_the_implementation_that_made_it():
    """The backward dispatches on the cache's record, whatever is chosen by then: a
    cache of the online core (which keeps a log-sum-exp, not the probabilities) is
    back-propagated by the online core even with the reference put in place."""
    r = np.random.default_rng(0)
    Z, V = B.asarray(r.standard_normal((2, 3, 4, 70))), B.asarray(r.standard_normal((2, 3, 70, 5)))
    dO = B.asarray(r.standard_normal((2, 3, 4, 5)))
    core = attention_core
    with dispatch.use("attention_core", "online"):
        O, cache = core.forward(Z.copy(), V)
    assert cache.impl.name == "online" and not hasattr(cache.value, "softmax")
    with dispatch.use("attention_core", "reference"):
        dZ, dV = core.backward(dO, cache)
        O_ref, c_ref = core.forward(Z.copy(), V)
        dZ_ref, dV_ref = core.backward(dO, c_ref)
    for got, want in [(O, O_ref), (dZ, dZ_ref), (dV, dV_ref)]:
        assert parity.relative_error(got, want) < 1e-12
    np.testing.assert_allclose(B.asnumpy(core.read(cache, "weights")),
                               B.asnumpy(core.read(c_ref, "weights")), rtol=1e-12, atol=1e-15)
    with pytest.raises(dispatch.KernelError, match="expected the cache"):
        core.backward(dO, c_ref.value)


def test_an_in_place_form_runs_only_where_the_caller_donates():
    x = B.asarray(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    assert relu.chosen("float32", donate=False).name == "reference"
    assert relu.chosen("float32", donate=True).name == "inplace"
    kept = x.copy()
    y, _ = relu.forward(x)
    np.testing.assert_array_equal(B.asnumpy(x), B.asnumpy(kept))  # not given up: untouched
    y2, _ = relu.forward(x, donate=True)
    assert y2 is x  # given up: its buffer reused


class SkipFeedForward:
    """``out = relu(u) W_2 + u W_3``, ``u = x W_1``: a module that reads its hidden
    pre-activation ``u`` again after handing it to ReLU. With ``donate=True`` that is the
    planted bug: ReLU works in u's buffer, so the skip term reads relu(u)."""

    def __init__(self, donate: bool):
        r = np.random.default_rng(0)
        self.W = [B.asarray(r.standard_normal(s).astype(np.float32))
                  for s in ((6, 10), (10, 6), (10, 6))]
        self.donate = donate

    def forward(self, x):
        W_1, W_2, W_3 = self.W
        u, c1 = linear.forward(x, W_1)  # (B, T, F)
        a, c_act = relu.forward(u, donate=self.donate)
        skip, c3 = linear.forward(u, W_3)  # reads u again
        main_, c2 = linear.forward(a, W_2)
        return main_ + skip, (c1, c_act, c2, c3)

    def backward(self, dout, cache):
        c1, c_act, c2, c3 = cache
        da, dW_2, _ = linear.backward(dout, c2)
        du_skip, dW_3, _ = linear.backward(dout, c3)
        du = relu.backward(da, c_act, donate=True) + du_skip
        dx, dW_1, _ = linear.backward(du, c1)
        return dx, dW_1, dW_2, dW_3


def test_the_poison_switch_catches_a_planted_reuse_of_a_donated_input():
    """Reading ``u`` after ``relu.forward(u, donate=True)``: silently wrong by default
    (finite numbers, not the right ones), NaN under the switch, so the reuse shows; the
    module that does not donate is unaffected by the switch."""
    r = np.random.default_rng(1)
    x = B.asarray(r.standard_normal((2, 3, 6)).astype(np.float32))
    dout = B.asarray(r.standard_normal((2, 3, 6)).astype(np.float32))
    right, c = SkipFeedForward(donate=False).forward(x)
    right_grads = SkipFeedForward(donate=False).backward(dout, c)
    planted = SkipFeedForward(donate=True)
    wrong, c = planted.forward(x)
    wrong_grads = planted.backward(dout, c)
    assert np.isfinite(B.asnumpy(wrong)).all()
    assert parity.relative_error(wrong, right) > 0.01  # silently wrong
    assert parity.relative_error(wrong_grads[3], right_grads[3]) > 0.01  # dW_3 reads u
    with dispatch.poison_donated():
        out, c = planted.forward(x)
        assert np.isnan(B.asnumpy(out)).any()
        with dispatch.poison_donated():
            fine, c_fine = SkipFeedForward(donate=False).forward(x)
        np.testing.assert_array_equal(B.asnumpy(fine), B.asnumpy(right))


def test_the_engine_never_reads_what_it_donates():
    """Three training steps of every attention variant under the poison switch give the
    very same loss and gradients as without it: no module reuses a donated input."""
    for kind, model in _variant_models().items():
        flat = model.flatten()
        flat.grads.fill(0)
        loss = _loss_and_backward(model)
        grads = B.asnumpy(flat.grads).copy()
        flat.grads.fill(0)
        with dispatch.poison_donated():
            loss_p = _loss_and_backward(model)
        assert loss == loss_p, kind
        np.testing.assert_array_equal(B.asnumpy(flat.grads), grads, err_msg=kind)


def _train_steps(n=3):
    cfg = TransformerConfig.preset("tiny", vocab_size=17, P_drop_attn=0.1)
    m = Transformer(cfg)
    r = np.random.default_rng(0)
    src, tgt_in, tgt_out = (B.asarray(r.integers(3, 17, (4, 6))) for _ in range(3))
    for step in range(n):
        m.zero_grad()
        loss, cache = m.loss_forward(src, tgt_in, tgt_out, rng=device.generator(step))
        m.loss_backward(cache)
        for p, g in zip(m.parameters().values(), m.gradients().values()):
            p -= 0.01 * g
    return float(loss), {k: B.asnumpy(g).copy() for k, g in m.gradients().items()}


@pytest.mark.usefixtures("f64")
def test_the_switch_forces_the_references_everywhere_with_the_same_results():
    """``dispatch.reference()``: every table calls its reference (the plain formulas of
    ops/); three training steps give the same loss and gradients as the faster defaults,
    within the harness's float64 limit."""
    loss, grads = _train_steps()
    with dispatch.reference():
        assert dispatch.reference_forced()
        assert all(t.chosen("float64") is t.reference for t in dispatch.TABLES.values())
        loss_ref, grads_ref = _train_steps()
    assert not dispatch.reference_forced()
    assert dispatch.table("attention_core").chosen("float64").name == "inplace"
    assert abs(loss - loss_ref) <= 1e-12 * abs(loss_ref)
    for k in grads:
        assert parity.relative_error(grads[k], grads_ref[k]) < parity.TOLERANCE["float64"], k


def test_the_environment_switch_and_the_command(capsys):
    env = {**os.environ, "SCRATCHFORMER_KERNELS": "reference"}
    code = ("import scratchformer.engine.ops; from scratchformer.engine import dispatch; "
            "print(dispatch.table('relu').chosen().name)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "reference", out.stderr
    assert main(["kernels"]) == 0
    listing = capsys.readouterr().out
    assert "attention_core" in listing and "inplace" in listing and "*" in listing
    assert "float32, float64" in listing  # each implementation's dtypes
    assert main(["kernels", "--check", "--dtype", "float64"]) == 0
    report = capsys.readouterr().out
    assert "all within their limits" in report and "0 (bitwise)" in report


def test_a_misspelt_kernels_setting_is_refused_in_one_line():
    env = {**os.environ, "SCRATCHFORMER_KERNELS": "refrence"}
    out = subprocess.run([sys.executable, "-m", "scratchformer", "kernels"], env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "SCRATCHFORMER_KERNELS='refrence'" in lines[0], out.stderr
    assert "reference" in lines[0] and "Traceback" not in out.stderr


def test_use_and_register_refuse_what_cannot_be():
    table = dispatch.table("attention_core")
    with pytest.raises(dispatch.KernelError, match="has no implementation 'fused'"):
        with dispatch.use(table, "fused"):
            pass
    table.register("gpu", table.reference.forward, table.reference.backward, backends=("cupy",),
                   proven=False, accessors=table.reference.accessors)
    try:
        if B.backend_name() == "numpy":
            with pytest.raises(dispatch.KernelError, match="runs on cupy, not on numpy"):
                with dispatch.use(table, "gpu"):
                    pass
        assert table.default_for("cupy", "float32").name == "inplace"  # unproven: no default
        with pytest.raises(dispatch.KernelError, match="exists"):
            table.register("gpu", abs, abs, accessors=table.reference.accessors)
    finally:
        table.unregister("gpu")
    acc = table.reference.accessors
    with pytest.raises(dispatch.KernelError, match="not proven"):
        table.register("x", abs, abs, default=True, proven=False, accessors=acc)
    with pytest.raises(dispatch.KernelError, match="lacks the accessors"):
        table.register("y", abs, abs)
    with pytest.raises(dispatch.KernelError, match="cannot donate"):
        table.register("z", abs, abs, donates=("V",), accessors=acc)


def test_the_choice_goes_by_dtype():
    """An implementation registered for float64 only is the default there and nowhere else."""
    table = dispatch.table("tanh")
    table.register("f64only", table.reference.forward, table.reference.backward,
                   dtypes=("float64",), default=True)
    try:
        assert table.chosen("float64").name == "f64only"
        assert table.chosen("float32").name == "reference"
        x = B.asarray(np.ones(3, dtype=np.float64))
        assert tanh.forward(x)[1].impl.name == "f64only"
    finally:
        table.unregister("f64only")


def test_a_spent_cache_refuses_a_second_backward():
    logits = B.asarray(np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32))
    target = B.asarray(np.array([[1, 2, 0], [3, 4, 1]]))
    loss, cache = cross_entropy.forward(logits, target, 0.1, 0, donate=True)
    cross_entropy.backward(1.0, cache)
    with pytest.raises(ValueError, match="spent"):
        cross_entropy.backward(1.0, cache)
    loss2, cache2 = cross_entropy.forward(logits.copy(), target, 0.1, 0)
    cross_entropy.backward(1.0, cache2)
    cross_entropy.backward(1.0, cache2)  # not donated: the reference, reusable


def test_the_error_metric():
    assert parity.relative_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == 0.5
    assert parity.relative_error(np.zeros(3), np.zeros(3)) == 0.0
    assert parity.relative_error(np.ones(3), np.zeros(3)) == 1.0  # absolute when b is 0
    assert parity.relative_error(np.ones(2), np.ones(3)) == float("inf")
