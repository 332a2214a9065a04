"""What a gradient check reports: the relative error of a tensor's analytic gradient
against its numeric one, the resolution below which a difference quotient is rounding
alone (a gradient zero to within it passes as zero), and the rows and table of a check.

Derivation: docs/derivations.md#checking-gradients (the relative error, its floor, the
rounding of a central difference).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scratchformer.engine import backend

DEFAULT_TOL = 1e-6


def rel_error(a, n) -> float:
    """``max|a - n| / max(1e-8, max(|a| + |n|))`` over the entries given."""
    a, n = backend.asnumpy(a), backend.asnumpy(n)
    if a.size == 0:
        return 0.0
    num = float(abs(a - n).max())
    den = float((abs(a) + abs(n)).max())
    return num / max(1e-8, den)


def rounding_floor(loss: float, scale: float, h: float, dtype="float64") -> float:
    """The relative error (``rel_error``) rounding alone gives a central difference of a
    loss of size ``loss``, against derivatives of size ``scale`` (a tensor's largest
    gradient entry for entry checks; for directions, its gradient's norm, the size of
    ``<g, v>``): each loss is computed to about ``eps * |L|`` (``eps``: the dtype's
    machine epsilon), so the difference quotient is off by about ``eps * |L| / h``, and the
    denominator is about ``2 * scale``. No tolerance below it can be met at this ``h``; a
    larger ``h`` lowers it until the truncation error, about ``h**2 |f'''| / 6``, takes
    over (docs/derivations.md#checking-gradients)."""
    eps = float(backend.np.finfo(dtype).eps)
    return eps * abs(loss) / h / max(1e-8, 2 * scale)


#: how many units of ``eps * |L| / h`` a difference quotient may be off by rounding alone:
#: each loss is a sum of many rounded terms, computed to a few ulps of ``|L|``
ROUNDING_ULPS = 16


def resolution(loss: float, h: float, dtype="float64") -> float:
    """The smallest derivative a central difference with step ``h`` resolves for a loss of
    size ``loss``: ``ROUNDING_ULPS * eps * |L| / h``. A gradient and a difference quotient
    both below it agree that the derivative is zero to within rounding."""
    eps = float(backend.np.finfo(dtype).eps)
    return ROUNDING_ULPS * eps * abs(loss) / h


#: a zero gradient's analytic side, as a fraction of the resolution: a true zero (the
#: key bias) is the backward pass's own rounding, 1e-20 to 1e-12 measured against
#: resolutions of 1e-10 to 1e-9 in float64; a gradient merely too small for the step to
#: resolve (float32, a tiny h: resolutions of 10 and more) is far above it
ZERO_FRACTION = 1e-6


def verdict(ana, num, tol: float, floor: float) -> tuple[bool, bool]:
    """``(passed, zero)`` of a row: within ``tol`` relative error, or zero to within
    rounding: the difference quotients below the resolution ``floor`` and the analytic
    gradient far below it (``ZERO_FRACTION``)."""
    a, n = backend.asnumpy(ana), backend.asnumpy(num)
    zero = (bool(a.size) and float(abs(n).max()) <= floor
            and float(abs(a).max()) <= ZERO_FRACTION * floor)
    return rel_error(a, n) < tol or zero, zero and rel_error(a, n) >= tol


@dataclass
class GradCheckRow:
    name: str  # input or parameter name
    shape: tuple  # its full shape
    max_rel_error: float
    max_abs_error: float
    checked: int  # entries (or directions) checked
    total: int  # entries in the tensor
    passed: bool
    redrawn: int = 0  # directions drawn again after crossing a kink (check_directions)
    # the entries checked, for showing which are wrong (entry checks only; None for
    # directions): flat indices into the tensor, and the numeric and analytic values
    indices: list | None = field(default=None, repr=False)
    numeric: object = field(default=None, repr=False)  # host float64 (checked,)
    analytic: object = field(default=None, repr=False)  # host float64 (checked,)
    zero: bool = False  # passed as zero: both sides below the check's resolution


@dataclass
class GradReport:
    rows: list = field(default_factory=list)
    tol: float = DEFAULT_TOL

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def max_rel_error(self) -> float:
        """The largest relative error of the rows not passed as zero (whose relative
        error is rounding's)."""
        return max((r.max_rel_error for r in self.rows if not r.zero), default=0.0)

    def __getitem__(self, name) -> GradCheckRow:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def failures(self) -> list:
        return [r for r in self.rows if not r.passed]

    def table(self) -> str:
        """A printable table: parameter, shape, max relative error, status."""
        w = max([len("parameter")] + [len(r.name) for r in self.rows])
        lines = [
            f"{'parameter':<{w}}  {'shape':<14} {'checked':>9}  {'max rel err':>11}  "
            f"{'max abs err':>11}  status"
        ]
        for r in self.rows:
            shape = "x".join(map(str, r.shape)) or "scalar"
            checked = f"{r.checked}/{r.total}"
            status = "ok" if r.passed else "FAIL"
            if r.zero:
                status += " (zero)"
            if r.redrawn:
                status += f" ({r.redrawn} redrawn)"
            lines.append(
                f"{r.name:<{w}}  {shape:<14} {checked:>9}  {r.max_rel_error:>11.2e}  "
                f"{r.max_abs_error:>11.2e}  {status}"
            )
        n_fail = len(self.failures())
        if any(r.zero for r in self.rows):
            lines.append(
                "(zero): a gradient zero to within what central differences resolve here "
                f"(both sides below {ROUNDING_ULPS} eps |L| / h): its relative error is "
                "rounding's"
            )
        lines.append(
            f"{len(self.rows) - n_fail} passed, {n_fail} failed "
            f"(tolerance {self.tol:.0e}, largest relative error {self.max_rel_error:.2e})"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


__all__ = [
    "DEFAULT_TOL",
    "ROUNDING_ULPS",
    "GradCheckRow",
    "GradReport",
    "rel_error",
    "resolution",
    "rounding_floor",
    "verdict",
]
