"""Finite-difference gradient checks: the proof that every backward pass is right.

For a scalar ``f`` of arrays, the numeric derivative of entry ``i`` is the central
difference ``(f(x + h e_i) - f(x - h e_i)) / 2h``, computed in float64. It is compared
with the analytic gradient from the hand-written backward pass by

    rel_error(a, n) = max_i |a_i - n_i| / max(1e-8, max_i (|a_i| + |n_i|))

the largest disagreement relative to the scale of the checked entries (so an entry
that is nearly zero does not turn round-off into a false failure, while any entry off
by more than ``tol`` of the tensor's scale fails). A tensor whose gradient is zero (an
attention's key bias: the softmax does not see a constant added to a row of logits) is
below what a difference quotient resolves, about ``eps * |L| / h``: rounding alone then
decides its relative error. Such a row passes as zero (``resolution``) when both sides
are below that resolution, and says so; a wrong gradient of any size above it fails.

Three entry points, one engine:

    check_op(linear_forward, linear_backward, x, W, b)      # a pure op
    check_module(layer, x, mask, rng=7)                     # a module: inputs + params
    check_model(model, src, tgt_in, tgt_out, rng=7)         # the whole model's loss
    check_model(lm, ids, targets, rng=7)                    # (any model's loss_forward)

and, for models too large to check entry by entry, directional derivatives:

    check_directions(model, src, tgt_in, tgt_out, rng=7)    # 2 forwards per direction

which compare ``(L(theta + h v) - L(theta - h v)) / 2h`` with ``<dL/dtheta, v>`` along
random directions ``v``: every entry moves at once, so a direction costs two forward
passes however many parameters it spans (see ``check_directions``).

An op or module is checked through ``L = sum(out * dout)`` with a random ``dout``.
``rng=<int>`` turns dropout on and replays the same masks in every evaluation (a fork of
one generator seeded with it, per forward). Nothing the caller passes is modified: inputs
and models are copied (and cast to float64) first.
"""

from __future__ import annotations

import copy
import inspect

from scratchformer.engine import backend, device
from scratchformer.engine.backend import xp
from scratchformer.engine.gradcheck_report import (  # the report's pieces, here too
    DEFAULT_TOL,
    ROUNDING_ULPS,
    ZERO_FRACTION,
    GradCheckRow,
    GradReport,
    rel_error,
    resolution,
    rounding_floor,
    verdict,
)

DEFAULT_H = 1e-6
DIRECTIONAL_H = 1e-7  # RMS step per entry; see check_directions for why smaller
#: the step of an entry-by-entry check of a model without kinks (GELU, no ReLU): there
#: rounding, about eps*|L|/h, is what limits a check (at GPT-2's loss of ln V ~ 8, 2e-9 at
#: h = 1e-6, against gradients as small as 1e-4 in its attention), a larger step lowers
#: it, truncation (about h^2 |f'''| / 6) raises it. Measured on two small random GPT-2s
#: (largest relative error at 1e-5, 3e-5, 1e-4): 2.0e-6, 5.8e-7, 2.0e-7 on one (rounding),
#: 5.8e-8, 1.1e-7, 1.2e-6 on the other (truncation): 3e-5 passes 1e-6 on both
SMOOTH_H = 3e-5
#: the RMS step of an extrapolated directional check (``check_directions``): its
#: truncation is O(h^4), so the step can be larger still, and rounding smaller (measured
#: on small random GPT-2s: 1e-4 best of 1e-4, 3e-5 and 1e-5 on every seed tried)
EXTRAPOLATED_H = 1e-4


def default_step(model, directions: bool) -> float:
    """The step a check of ``model`` takes by default: for a model without kinks (its
    activation GELU) ``SMOOTH_H`` entry by entry and ``EXTRAPOLATED_H`` along directions
    (extrapolated then: ``check_directions``), else ``DIRECTIONAL_H`` or ``DEFAULT_H``."""
    if getattr(getattr(model, "config", None), "activation", "relu") != "relu":
        return EXTRAPOLATED_H if directions else SMOOTH_H
    return DIRECTIONAL_H if directions else DEFAULT_H


def sample_entries(size: int, max_entries, rng):
    """Flat indices to check: all of them (``max_entries`` None), or a sample of
    ``max_entries`` drawn without replacement by ``rng``, sorted."""
    if max_entries is None or size <= max_entries:
        return range(size)
    return sorted(rng.choice(size, size=max_entries, replace=False).tolist())


def numeric_gradient(f, x, indices, h: float = DEFAULT_H):
    """Central differences of the scalar ``f()`` w.r.t. the given flat entries of ``x``.

    ``x`` is perturbed in place (any memory layout) and restored exactly; returns a host
    float64 vector.
    """
    out = backend.np.empty(len(indices))
    for j, i in enumerate(indices):
        pos = tuple(int(k) for k in backend.np.unravel_index(i, x.shape))  # C-order entry i
        f_plus, f_minus = central_values(f, x, pos, h)
        out[j] = (f_plus - f_minus) / (2.0 * h)
    return out


def central_values(f, x, pos: tuple, h: float = DEFAULT_H) -> tuple[float, float]:
    """``(f() with x[pos] + h, f() with x[pos] - h)``; the entry is restored exactly."""
    old = x[pos].copy()
    x[pos] = old + h
    f_plus = float(f())
    x[pos] = old - h
    f_minus = float(f())
    x[pos] = old
    return f_plus, f_minus


def check_gradients(
    f,
    arrays: dict,
    analytic: dict,
    *,
    h=DEFAULT_H,
    tol=DEFAULT_TOL,
    max_entries=None,
    seed=0,
    progress=None,
) -> GradReport:
    """The engine: ``f()`` reads ``arrays`` (name -> float64 array, perturbed in place and
    restored); ``analytic`` holds the backward pass's gradient for each name.
    ``progress``: called with the number of entries of each tensor once it is checked."""
    sampler = backend.host_rng(seed)
    report = GradReport(tol=tol)
    floor = resolution(float(f()), h) if arrays else 0.0
    for name, x in arrays.items():
        g = analytic[name]
        if tuple(g.shape) != tuple(x.shape):
            raise ValueError(f"gradient of {name} has shape {g.shape}, expected {x.shape}")
        idx = list(sample_entries(int(x.size), max_entries, sampler))
        num = numeric_gradient(f, x, idx, h)
        ana = backend.asnumpy(g).reshape(-1)[idx].astype(float)
        rel = rel_error(ana, num)
        abs_err = float(abs(ana - num).max()) if idx else 0.0
        passed, zero = verdict(ana, num, tol, floor)
        report.rows.append(
            GradCheckRow(
                name,
                tuple(x.shape),
                rel,
                abs_err,
                len(idx),
                int(x.size),
                passed,
                indices=idx,
                numeric=num,
                analytic=ana,
                zero=zero,
            )
        )
        if progress is not None:
            progress(len(idx))
    return report


# -- helpers ---------------------------------------------------------------------------
def _is_float_array(a) -> bool:
    return backend.is_array(a) and a.dtype.kind == "f"


def _to64(a):
    """A private C-ordered float64 copy of a float array (other arguments pass through)."""
    return backend.asarray(a).astype(xp.float64, order="C") if _is_float_array(a) else a


def _make_rng(kwargs):
    """``rng=<int>`` in kwargs becomes a generator made once, and each call gets a fork
    of it (a copy of its state): every evaluation replays the same dropout masks."""
    seed = kwargs.get("rng")
    if isinstance(seed, int) and not isinstance(seed, bool):
        base = device.generator(seed)
        return lambda: {**kwargs, "rng": device.fork(base)}
    return lambda: dict(kwargs)


def _random_like(out, seed):
    return backend.asarray(backend.host_rng(seed).standard_normal(out.shape))


def _pair_gradients(grads, args):
    """Match a backward's return value to the float positional args it differentiates.

    ``backward`` returns either one gradient per positional argument (None where an
    argument has none, as ``linear_backward`` does for an omitted bias) or one per float
    argument, in order. Returns ``{arg index: gradient}``.
    """
    if grads is None:
        return {}
    grads = grads if isinstance(grads, tuple) else (grads,)
    wrt = [i for i, a in enumerate(args) if _is_float_array(a)]
    if len(grads) == len(args):
        return {i: grads[i] for i in wrt}
    present = [g for g in grads if g is not None]
    if len(present) != len(wrt):
        raise ValueError(f"backward returned {len(present)} gradients for {len(wrt)} float inputs")
    return dict(zip(wrt, present))


def _arg_names(fn, n):
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else f"arg{i}" for i in range(n)]


# -- the three entry points ----------------------------------------------------------------
def check_op(
    forward, backward, *args, tol=DEFAULT_TOL, h=DEFAULT_H, max_entries=None, seed=0, **kwargs
) -> GradReport:
    """Check an op pair. ``backward(dout, cache)`` must return the gradients of the
    floating-point positional ``args`` in order (integer ids, masks and None are passed
    through and not checked)."""
    args = [_to64(a) for a in args]
    call_kwargs = _make_rng(kwargs)

    def fresh():  # each call its own copies: an implementation may work in their buffers
        return [a.copy() if _is_float_array(a) else a for a in args]

    out, cache = forward(*fresh(), **call_kwargs())
    dout = _random_like(out, seed + 1)
    grads = _pair_gradients(backward(dout.copy(), cache), args)
    names = _arg_names(forward, len(args))

    def f():
        return (forward(*fresh(), **call_kwargs())[0] * dout).sum()

    arrays = {names[i]: args[i] for i in grads}
    analytic = {names[i]: g for i, g in grads.items()}
    return check_gradients(f, arrays, analytic, h=h, tol=tol, max_entries=max_entries, seed=seed)


def check_module(
    module,
    *args,
    tol=DEFAULT_TOL,
    h=DEFAULT_H,
    max_entries=None,
    seed=0,
    inputs=True,
    params=True,
    **kwargs,
) -> GradReport:
    """Check a module's input gradients (floating-point positional args, in the order
    ``backward`` returns them) and every parameter (``params.`` names). The module is
    deep-copied and cast to float64 first."""
    m = copy.deepcopy(module).astype(xp.float64)
    args = [_to64(a) for a in args]
    call_kwargs = _make_rng(kwargs)
    # the backward runs on copies of the module, its inputs and dout: what it does to
    # them (a write into dout, a cache field, a parameter) leaves the differences alone
    mb = copy.deepcopy(m)
    out, cache = mb.forward(*[a.copy() if _is_float_array(a) else a for a in args],
                            **call_kwargs())
    dout = _random_like(out, seed + 1)
    mb.zero_grad()
    grads = _pair_gradients(mb.backward(dout.copy(), cache), args)

    def f():
        return (m.forward(*args, **call_kwargs())[0] * dout).sum()

    arrays, analytic = {}, {}
    if inputs:
        names = _arg_names(m.forward, len(args))
        for i, g in grads.items():
            arrays[names[i]], analytic[names[i]] = args[i], g
    if params:
        grads_by_name = mb.gradients()
        for name, p in m.parameters().items():
            arrays[name], analytic[name] = p, grads_by_name[name]
    return check_gradients(f, arrays, analytic, h=h, tol=tol, max_entries=max_entries, seed=seed)


def check_model(
    model,
    *batch,
    rng=None,
    eps_ls=None,
    tol=DEFAULT_TOL,
    h=DEFAULT_H,
    max_entries=20,
    seed=0,
    names=None,
    progress=None,
) -> GradReport:
    """Check every parameter of a whole model's label-smoothed loss on ``batch``, what
    its ``loss_forward`` takes: ``(src, tgt_in, tgt_out)`` for the encoder-decoder,
    ``(ids, targets)`` for the language model, ``(ids, labels)`` for the classifier.

    ``rng=<int>`` turns dropout on with replayed masks. Large tensors are checked on a
    seeded sample of ``max_entries`` entries (None checks all); ``names`` restricts the
    check to some parameters; ``progress`` is as for ``check_gradients``.
    """
    params, grads, f = _model_loss(model, xp.float64, batch, rng, eps_ls, names)
    if names is not None:
        params = {k: params[k] for k in names}
    analytic = {k: grads[k] for k in params}
    return check_gradients(
        f, params, analytic, h=h, tol=tol, max_entries=max_entries, seed=seed, progress=progress
    )


def check_directions(
    model,
    *batch,
    directions: int = 1,
    rng=None,
    eps_ls=None,
    dtype="float64",
    h=DIRECTIONAL_H,
    tol=DEFAULT_TOL,
    retries=2,
    seed=0,
    names=None,
    progress=None,
    extrapolate=False,
) -> GradReport:
    """Directional checks of a whole model's loss on ``batch`` (as ``check_model``'s):
    seconds at any size.

    For a direction ``v`` (Gaussian, scaled to an RMS of 1 per entry, so ``h`` is the
    typical step of one entry, as in the entry-by-entry check) the directional
    derivative of the loss is

        D_v L = lim (L(theta + h v) - L(theta - h v)) / 2h = <dL/dtheta, v>,

    the numeric side from two forward passes, the analytic side a dot product with the
    backward pass's gradient. A wrong gradient ``g + e`` shows as ``<e, v>``, which is
    nonzero for almost every ``v`` (the directions orthogonal to ``e`` have measure zero),
    so one direction per tensor catches any error in it that is larger than the rounding
    noise. The dot product is taken with the step that was actually applied,
    ``(fl(theta + h v) - fl(theta - h v)) / 2h``, so rounding the parameters (float32)
    adds no error of its own.

    **Kinks.** ReLU is not differentiable at 0. An entry-wise step moves one weight and
    rarely carries a pre-activation across 0; a directional step moves every weight of a
    tensor, so each pre-activation moves by about ``h * |x|``, and at ``h = 1e-6`` some
    of the tens of thousands of them cross (measured: relative errors up to 3e-2 in the
    ``small`` model with ReLU, none with GELU). Hence the smaller default step, 1e-7,
    and the rule: a direction that fails is drawn again, up to ``retries`` times. A
    wrong gradient fails along every direction; a kink crossed by chance (about 1 in 100
    directions at ``base`` size) does not recur. The row counts the directions redrawn.

    **Extrapolation.** Along a direction every entry moves, so the truncation error of a
    central difference, ``h^2 D_v^3 L / 6``, grows with the tensor, while rounding,
    about ``eps |L| / h``, wants ``h`` large. ``extrapolate=True`` takes the steps ``h`` and
    ``h / 2`` and Richardson's ``(4 D(h/2) - D(h)) / 3``, whose ``h^2`` terms cancel
    (truncation ``O(h^4)``), at twice the forward passes: a smooth model (GELU) is then
    checked at ``h = 1e-4`` (``EXTRAPOLATED_H``), where rounding is small, without paying
    for it in truncation. (Not across a kink: ReLU models keep the small step and the redraws.)

    Every parameter tensor gets ``directions`` directions of its own (the row names the
    tensor that fails), then all parameters together get ``directions`` more (the row
    ``all parameters``). Each row's error is ``rel_error`` over its directions. The model
    is copied in ``dtype`` ("float64", or "float32" to see what a float32 check can
    resolve); ``rng=<int>`` replays the dropout masks; ``names`` restricts the per-tensor
    rows; ``progress`` is called with 1 after every direction.
    """
    np = backend.np
    params, grads, loss = _model_loss(model, getattr(xp, dtype), batch, rng, eps_ls, names)
    sampler = backend.host_rng(seed)
    report = GradReport(tol=tol)
    floor = resolution(loss(), h, dtype)

    def row(label: str, group: list[str]) -> None:
        ana, num, redrawn = np.empty(directions), np.empty(directions), 0
        for k in range(directions):
            for attempt in range(retries + 1):
                ana[k], num[k] = _one_direction(
                    params, grads, group, sampler, h, loss, extrapolate
                )
                if verdict(ana[k : k + 1], num[k : k + 1], tol, floor)[0] or attempt == retries:
                    break
                redrawn += 1
            if progress is not None:
                progress(1)
        size = sum(int(params[n].size) for n in group)
        shape = tuple(params[group[0]].shape) if len(group) == 1 else (size,)
        err = float(abs(ana - num).max())
        rel = rel_error(ana, num)
        passed, zero = verdict(ana, num, tol, floor)
        report.rows.append(
            GradCheckRow(label, shape, rel, err, directions, size, passed, redrawn, zero=zero)
        )

    for name in names if names is not None else params:
        row(name, [name])
    row("all parameters", list(params))
    return report


def _model_loss(model, dtype, batch, rng, eps_ls, names):
    """A copy of ``model`` in ``dtype`` after one forward and backward pass on ``batch``:
    ``(parameters, their gradients, loss())``, where ``loss()`` is a forward pass with
    the same dropout masks (a fork of one generator made from ``rng``, each time)."""
    m = copy.deepcopy(model).astype(dtype)
    base = device.generator(rng) if rng is not None else None

    def fresh_rng():
        return device.fork(base) if base is not None else None

    smoothing = {} if eps_ls is None else {"eps_ls": eps_ls}  # None: the model's own

    def loss() -> float:
        return float(m.loss_forward(*batch, rng=fresh_rng(), **smoothing)[0])

    _, cache = m.loss_forward(*batch, rng=fresh_rng(), **smoothing)
    m.zero_grad()
    m.loss_backward(cache)
    params, grads = m.parameters(), m.gradients()
    unknown = sorted(set(names or ()) - set(params))
    if unknown:
        raise KeyError(f"no such parameters: {unknown}")
    return params, grads, loss


def _one_direction(params, grads, group, sampler, h, loss, extrapolate=False):
    """``(analytic, numeric)`` derivative of ``loss()`` along one random direction over
    the tensors ``group``, which are moved in place and restored exactly. ``extrapolate``:
    Richardson's combination of the steps ``h`` and ``h / 2`` (see ``check_directions``)."""
    np = backend.np
    v = {n: sampler.standard_normal(params[n].shape) for n in group}
    squares = sum(float((d * d).sum()) for d in v.values())
    scale = h / float(np.sqrt(squares / sum(d.size for d in v.values())))  # RMS step h
    old = {n: params[n].copy() for n in group}
    if not extrapolate:
        return _quotients(params, grads, group, v, old, scale, h, loss)
    a1, n1 = _quotients(params, grads, group, v, old, scale, h, loss)
    a2, n2 = _quotients(params, grads, group, v, old, scale / 2, h / 2, loss)
    return (4 * a2 - a1) / 3, (4 * n2 - n1) / 3


def _quotients(params, grads, group, v, old, scale, h, loss) -> tuple[float, float]:
    """``(analytic, numeric)`` along ``v`` at the RMS step ``h`` (``scale * v`` entry by
    entry): the central difference of ``loss()`` and ``<g, the step taken> / 2h``."""
    # theta +- h v, rounded to the parameters' dtype, each computed once
    up, down = {}, {}
    analytic = 0.0
    for n in group:
        step = backend.asarray(scale * v[n]).astype(old[n].dtype)
        up[n], down[n] = old[n] + step, old[n] - step
        taken = backend.asnumpy(up[n]).astype(float) - backend.asnumpy(down[n])
        # <g, (theta+ - theta-) / 2h> in float64: the step actually taken
        analytic += float((backend.asnumpy(grads[n]).astype(float) * taken).sum()) / (2.0 * h)
    values = []
    for moved in (up, down):
        for n in group:
            params[n][...] = moved[n]
        values.append(loss())
    for n in group:
        params[n][...] = old[n]
    return analytic, (values[0] - values[1]) / (2.0 * h)


__all__ = [
    "DEFAULT_H",
    "DEFAULT_TOL",
    "DIRECTIONAL_H",
    "EXTRAPOLATED_H",
    "ROUNDING_ULPS",
    "SMOOTH_H",
    "GradCheckRow",
    "GradReport",
    "central_values",
    "check_directions",
    "check_gradients",
    "check_model",
    "check_module",
    "check_op",
    "default_step",
    "numeric_gradient",
    "rel_error",
    "resolution",
    "ZERO_FRACTION",
    "rounding_floor",
    "sample_entries",
]
