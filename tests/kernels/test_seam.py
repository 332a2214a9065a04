"""The kernel seam: one table per op, the choice between implementations, the switch that
forces the references, and the parity harness that checks every registered implementation
(and fails on a broken one).

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, Dv d_v.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scratchformer import backend as B
from scratchformer import device, kernels
from scratchformer.cli import main
from scratchformer.gradcheck import check_op
from scratchformer.kernels import parity
from scratchformer.kernels.cases import CASES, GRADIENTS
from scratchformer.models import Transformer, TransformerConfig
from scratchformer.ops.attention import attention_core_backward

OPS = Path(kernels.__file__).resolve().parents[1] / "ops"
#: forward/backward pairs of ops/ that are pieces of an op, not ops the modules call
PIECES = {"skew", "dot_product_logits"}


def op_pairs():
    """``{name: file}`` of every ``<name>_forward`` with a ``<name>_backward`` in ops/."""
    found = {}
    for path in OPS.glob("*.py"):
        names = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
        for n in names:
            if n.endswith("_forward") and n[: -len("_forward")] + "_backward" in names:
                found[n[: -len("_forward")]] = path.stem
    return found


def test_every_op_has_a_table_whose_reference_is_the_op():
    for name, module in op_pairs().items():
        if name in PIECES:
            continue
        table = kernels.table(name)
        assert table.reference.forward.__name__ == f"{name}_forward", name
        assert table.reference.forward.__module__ == f"scratchformer.ops.{module}"
        assert table.reference.backward.__name__ == f"{name}_backward"
    assert set(kernels.TABLES) == set(CASES) == set(GRADIENTS)  # every table can be checked


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_registered_implementation_equals_its_reference(dtype):
    """The harness on fresh random inputs (odd sizes, an empty query row, dropout):
    every row within its limit, the in-place forms bitwise."""
    rows = parity.check_all(kernels.TABLES, (dtype,))
    assert rows, "no implementation besides the references is registered"
    bad = [r for r in rows if not r.passed]
    assert not bad, bad
    exact = [r for r in rows if r.limit == 0]
    assert exact and all(r.error == 0 for r in exact)
    assert {r.table for r in rows} >= {"attention", "attention_core", "relu", "cross_entropy"}


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
    rows = parity.check_implementation(kernels.attention_core, impl.name, "float64")
    failed = {r.tensor for r in rows if not r.passed}
    assert failed == {"dZ"}, rows  # the output and dV are right


def test_a_broken_implementation_fails_the_op_gradient_check(plant):
    """The finite differences judge a registered implementation as they judge the
    reference: the missing row sum fails dZ."""
    impl = plant("attention_core", _core_without_the_row_sum)
    r = np.random.default_rng(0)
    Z, V = B.asarray(r.standard_normal((2, 3, 4, 5))), B.asarray(r.standard_normal((2, 3, 5, 3)))
    report = check_op(impl.forward, impl.backward, Z, V)
    assert [row.name for row in report.failures()] == ["Z"]


def test_the_model_calls_the_chosen_implementation(plant):
    """A planted implementation is what the modules run: here an attention whose forward
    returns zeros changes the model's loss."""
    cfg = TransformerConfig.preset("tiny", vocab_size=11)
    src = B.asarray(np.array([[3, 4, 5]]))
    tgt = B.asarray(np.array([[1, 6, 7]]))
    before = float(Transformer(cfg).loss_forward(src, tgt, tgt)[0])

    def zeros(Q, K, V, mask=None, p_drop=0.0, rng=None):
        O, cache = kernels.attention.reference.forward(Q, K, V, mask, p_drop, rng)
        return O * 0, cache

    plant("attention", kernels.attention.reference.backward, forward=zeros)
    assert float(Transformer(cfg).loss_forward(src, tgt, tgt)[0]) != before


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


def test_the_switch_forces_the_references_everywhere_with_the_same_results():
    """``kernels.reference()``: every table calls its reference; the in-place defaults
    being bitwise equal, three training steps give the very same loss and gradients."""
    loss, grads = _train_steps()
    with kernels.reference():
        assert kernels.reference_forced()
        assert all(t.chosen() is t.reference for t in kernels.TABLES.values())
        loss_ref, grads_ref = _train_steps()
    assert not kernels.reference_forced()
    assert kernels.attention.chosen().name == "inplace"
    assert loss == loss_ref
    for k in grads:
        np.testing.assert_array_equal(grads[k], grads_ref[k])


def test_the_environment_switch_and_the_command(capsys):
    env = {**os.environ, "SCRATCHFORMER_KERNELS": "reference"}
    code = "from scratchformer import kernels; print(kernels.attention.chosen().name)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "reference", out.stderr
    assert main(["kernels"]) == 0
    listing = capsys.readouterr().out
    assert "attention_core" in listing and "inplace" in listing and "*" in listing
    assert main(["kernels", "--check", "--dtype", "float64"]) == 0
    report = capsys.readouterr().out
    assert "all within their limits" in report and "0 (bitwise)" in report


def test_use_and_register_refuse_what_cannot_be():
    table = kernels.attention
    with pytest.raises(kernels.KernelError, match="has no implementation 'fused'"):
        with kernels.use(table, "fused"):
            pass
    gpu_only = kernels.Implementation("gpu", table.reference.forward, table.reference.backward,
                                      backends=("cupy",), proven=False)  # fmt: skip
    table.register(gpu_only)
    try:
        if B.backend_name() == "numpy":
            with pytest.raises(kernels.KernelError, match="runs on cupy, not on numpy"):
                with kernels.use(table, "gpu"):
                    pass
        assert table.default_for("cupy").name == "inplace"  # unproven: never a default
        with pytest.raises(kernels.KernelError, match="exists"):
            table.register(gpu_only)
    finally:
        table.unregister("gpu")
    unproven = kernels.Implementation("x", abs, abs, default=True, proven=False)
    with pytest.raises(kernels.KernelError, match="not proven"):
        table.register(unproven)


def test_the_error_metric():
    assert parity.relative_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == 0.5
    assert parity.relative_error(np.zeros(3), np.zeros(3)) == 0.0
    assert parity.relative_error(np.ones(3), np.zeros(3)) == 1.0  # absolute when b is 0
    assert parity.relative_error(np.ones(2), np.ones(3)) == float("inf")
