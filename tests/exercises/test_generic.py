"""The diagnoses read off the numbers, with no catalogue: a sign, a constant factor and
the scale it matches, swapped outputs, zeros, an error only on masked entries or only on
repeated ids."""

from __future__ import annotations

import pytest

from scratchformer.engine.ops import attention as att
from scratchformer.engine.ops import dropout, embedding, linear, loss, softmax
from scratchformer.exercises import EXERCISES
from scratchformer.exercises.grade import FAILING, grade, report


def _linear_sign(dout, cache):
    dx, dW, db = linear.linear_backward(dout, cache)
    return -dx, dW, db


def _linear_twice(dout, cache):
    dx, dW, db = linear.linear_backward(dout, cache)
    return dx, dW + dW, db


def _ce_no_mean(dout, cache):
    return loss.cross_entropy_backward(dout, cache) * float(cache.n_tokens)


def _dropout_scale_twice(dout, cache):
    return dropout.dropout_backward(dout, cache) * cache.scale


def _logits_no_scale(dZ, cache):
    dQ, dK = att.dot_product_logits_backward(dZ, cache)
    return dQ, dK / cache.scale


def _softmax_masked(dout, cache):
    return softmax.softmax_backward(dout, cache) + (cache.P == 0) * dout


def _core_dropout_scale_twice(dO, cache, dA_drop=None):
    dZ, dV = att.attention_core_backward(dO, cache, dA_drop)
    return dZ * (cache.dropout.scale if cache.dropout.mask is not None else 1.0), dV


def _embedding_zero(dout, cache):
    return 0.0 * embedding.embedding_backward(dout, cache)


CASES = [
    ("linear", {"linear_backward": _linear_sign}, "dx has the wrong sign"),
    ("linear", {"linear_backward": _linear_twice}, "dW = 2 x the right dW, on every entry: the factor is 2"),  # noqa: E501
    ("cross_entropy", {"cross_entropy_backward": _ce_no_mean}, "the factor is n_tokens"),
    ("dropout", {"dropout_backward": _dropout_scale_twice}, "the factor is 1/(1-p)"),
    ("attention", {"dot_product_logits_backward": _logits_no_scale}, "dK = "),
    # the dropout's cache is the one its table made: the scale is read through it
    ("attention", {"attention_core_backward": _core_dropout_scale_twice}, "x the right dQ, on every entry of each input: the factor is 1/(1-p)"),  # noqa: E501
    ("softmax", {"softmax_backward": _softmax_masked}, "wrong only at entries where the right dx is zero"),  # noqa: E501
    ("embedding", {"embedding_backward": _embedding_zero}, "dE is zero on every entry"),
]


@pytest.mark.parametrize("name, code, says", CASES, ids=[f"{c[0]}-{c[2][:24]}" for c in CASES])
def test_a_wrong_gradient_is_read_off_the_numbers(name, code, says):
    ex = EXERCISES[name]
    g = grade(ex, ex.with_code(code), seed=1)
    assert g.status == FAILING
    text = " ".join(" ".join(report(g)).split())
    assert "found: " in text and says in text, text
    assert "not a mistake we know" not in text


def test_the_logits_scale_is_named_on_every_input():
    ex = EXERCISES["attention"]
    g = grade(ex, ex.with_code({"dot_product_logits_backward": _logits_no_scale}), seed=2)
    found = [m.says for m, parts in g.diagnosis if parts == ["dK"]]
    assert found and found[0].endswith("the factor is sqrt(d_k)"), found


def test_swapped_outputs_are_named():
    ex = EXERCISES["multi_head_attention"]
    engine = ex.engine()["multi_head_attention_backward"]

    def swapped(self, dout, cache):
        dx_q, dx_kv = engine(self, dout, cache)
        return dx_kv, dx_q

    # the self-attention inputs only: dx_q and dx_kv have the same shape there
    from scratchformer.exercises.generic import diagnose

    mine = ex.outputs({"multi_head_attention_backward": swapped})[1:2]
    ref = ex.outputs(ex.engine())[1:2]
    found = diagnose(ex, mine, ref, ["dx_q", "dx_kv"])
    assert [(m.name, parts) for m, parts in found] == [("generic:swapped", ["dx_q", "dx_kv"])]


def test_a_factor_per_row_and_a_gradient_wrong_on_some_inputs_only_are_named():
    from scratchformer.engine.ops import layernorm

    ln = EXERCISES["layernorm"]

    def rstd_twice(dout, cache):
        dx, dgamma, dbeta = layernorm.layernorm_backward(dout, cache)
        return dx * cache.rstd, dgamma, dbeta

    g = grade(ln, {"layernorm_backward": rstd_twice}, seed=1)
    assert [(m.name, parts) for m, parts in g.diagnosis] == [("generic:row-factor", ["dx"])]

    add_norm = EXERCISES["add_norm"]

    def pre_ln_zeros(self, ds_in, cache):  # right in post-LN, zeros in pre-LN
        return 0.0 * self._norm_backward(ds_in, cache.norm) if self.norm_first else ds_in

    g = grade(add_norm, add_norm.with_code({"add_norm_enter_backward": pre_ln_zeros}))
    found = {m.name: m.says for m, parts in g.diagnosis}
    assert "generic:some-inputs" in found, found
    assert "wrong on: pre-LN" in found["generic:some-inputs"]
