"""``scratchformer gradcheck --explain PARAM``: one parameter's check, entry by entry."""

import re

from scratchformer.app.cli import main


def test_explain_shows_analytic_and_numeric_side_by_side(capsys):
    code = main(["gradcheck", "--explain", "decoder.layers.0.cross_attn.W_k", "--samples", "4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "L(theta_i + h)" in out and "numeric" in out and "analytic" in out
    rows = [line for line in out.splitlines() if re.match(r"^\(\d+, \d+\)\s", line)]
    assert len(rows) == 4
    for line in rows:
        entry, theta, l_plus, l_minus, num, ana, abs_err, rel = line.rsplit(None, 7)
        h = 1e-6
        # the numeric column is the central difference of the two printed losses
        assert abs((float(l_plus) - float(l_minus)) / (2 * h) - float(num)) < 1e-4
        assert abs(float(num) - float(ana)) <= 1e-6 * (abs(float(num)) + abs(float(ana))) + 1e-9
    assert "PASSED" in out


def test_explain_pre_ln_only_parameter_and_tight_tolerance(capsys):
    assert main(["gradcheck", "--explain", "encoder.norm.gamma", "--norm", "pre"]) == 0
    assert "8 of 16 entries" in capsys.readouterr().out
    code = main(["gradcheck", "--explain", "embed.E", "--samples", "3", "--tol", "1e-14"])
    assert code == 1
    assert "FAILED" in capsys.readouterr().out


def test_explain_unknown_parameter_suggests_close_names(capsys):
    code = main(["gradcheck", "--explain", "decoder.layers.0.cross.W_k"])
    err = capsys.readouterr().err
    assert code == 2
    assert "no parameter 'decoder.layers.0.cross.W_k'" in err
    assert "did you mean decoder.layers.0.cross_attn.W_k" in err
    assert main(["gradcheck", "--explain", "encoder.norm.gamma"]) == 2  # post-LN has no final LN
    assert "no parameter 'encoder.norm.gamma'" in capsys.readouterr().err
