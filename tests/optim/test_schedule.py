"""The paper's warmup schedule against docs/reference.md ("Learning-rate schedule"), and
the alternative."""

import pytest

from scratchformer.engine.optim import ConstantSchedule, NoamSchedule, make_schedule


@pytest.mark.parametrize(
    "step, want", [(1, "1.7469e-07"), (4000, "6.98771e-04"), (16000, "3.49386e-04")]
)
def test_reference_values(step, want):
    """docs/reference.md's values for d_model = 512, warmup = 4000, to the digits given."""
    digits = len(want.split("e")[0]) - 2
    assert f"{NoamSchedule(512, 4000)(step):.{digits}e}" == want


def test_shape_of_the_schedule():
    s = NoamSchedule(64, warmup=100, lr_factor=2.0)
    # linear during warmup, peak at warmup, then s^-0.5
    assert s(50) == pytest.approx(s(1) * 50, rel=1e-12)
    assert s(100) == pytest.approx(s.peak, rel=1e-12) == pytest.approx(2.0 / (64 * 100) ** 0.5)
    assert max(s(k) for k in range(1, 1000)) == s(100)
    assert s(400) == pytest.approx(s(100) / 2, rel=1e-12)


def test_steps_count_from_one():
    with pytest.raises(ValueError, match="from 1"):
        NoamSchedule(512, 4000)(0)


def test_constant_with_linear_warmup():
    s = ConstantSchedule(1e-3, warmup=10)
    assert [s(k) for k in (1, 5, 10, 11, 1000)] == pytest.approx([1e-4, 5e-4, 1e-3, 1e-3, 1e-3])
    assert ConstantSchedule(2e-3)(1) == 2e-3


def test_make_schedule():
    assert make_schedule("noam", d_model=512, warmup=4000)(4000) == pytest.approx(
        6.98771e-4, rel=1e-5
    )
    assert make_schedule("constant", d_model=512, warmup=0, lr=0.5)(7) == 0.5
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        make_schedule("cosine", d_model=512, warmup=1)
