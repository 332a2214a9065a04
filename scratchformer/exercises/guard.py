"""The inputs a learner's function must only read: copied before the call, compared after.

A backward pass receives ``dout``, the forward's cache and (for a layer) the module's
parameters. Other code reads them after it returns: the caller passes the same ``dout``
on to a second path, a weight shared by two layers has one cache per call, the engine
reads a module's parameters at the next step. A backward that writes into one of them
(``dout *= mask``, ``x[...] = 0``, ``dx += ...`` into the array it was given) can return
the right numbers and still break the model, so the grader fails it:

    inputs = {"dout": dout, "cache": cache}
    ret = guarded(make, path, "dropout_backward")   # make() -> (inputs, call)

``guarded`` runs ``call`` on fresh inputs, and if an array of ``inputs`` changed it runs
``make()`` again with those arrays read-only, so the write raises in the learner's file
and its line is known; ``ChangedInput`` names the array and that line.
"""

from __future__ import annotations

import contextlib
import dataclasses

from scratchformer.engine import backend
from scratchformer.exercises.spec import LearnerError, learner_code, shown, where_in


class ChangedInput(LearnerError):
    """The learner's function wrote into an array it was given to read."""


def arrays(obj, name: str, found: list | None = None, depth: int = 0) -> list:
    """``[(name, array)]`` of every array in ``obj``: an array, a tuple (a NamedTuple's
    fields by name), a dataclass, a dict or a list, followed to a few levels."""
    found = [] if found is None else found
    if depth > 6 or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return found
    if backend.is_array(obj):
        found.append((name, obj))
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for field, value in zip(obj._fields, obj):
            arrays(value, f"{name}.{field}", found, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            arrays(getattr(obj, f.name, None), f"{name}.{f.name}", found, depth + 1)
    elif isinstance(obj, (tuple, list)):
        for i, value in enumerate(obj):
            arrays(value, f"{name}[{i}]", found, depth + 1)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            arrays(value, f"{name}[{key!r}]", found, depth + 1)
    return found


def _listed(inputs: dict) -> list:
    seen, found = set(), []
    for key, obj in inputs.items():
        for name, a in arrays(obj, key):
            if id(a) not in seen:  # the same array reached twice is named once
                seen.add(id(a))
                found.append((name, a))
    return found


def changed(snapshot: list) -> list[str]:
    """The names of the arrays of ``snapshot`` (``[(name, array, copy)]``) that differ
    from their copy now (NaN equal to NaN)."""
    xp = backend.xp
    return [
        name
        for name, a, before in snapshot
        if a.shape != before.shape
        or not bool(xp.array_equal(a, before, equal_nan=a.dtype.kind in "fc"))
    ]


@contextlib.contextmanager
def read_only(listed: list):
    """The arrays of ``listed`` read-only while the context is open (NumPy only: on other
    backends the comparison afterwards still fails the function, without its line)."""
    saved = []
    try:
        for _, a in listed:
            flags = getattr(a, "flags", None)
            if flags is not None and hasattr(flags, "writeable") and a.flags.writeable:
                with contextlib.suppress(ValueError):
                    a.flags.writeable = False
                    saved.append(a)
        yield
    finally:
        for a in saved:
            with contextlib.suppress(ValueError):
                a.flags.writeable = True


def guarded(make, path: str | None, doing: str):
    """``call()`` of ``make() -> (inputs, call)``, inside ``learner_code``; ChangedInput
    if it changed an array of ``inputs`` (a dict: name -> array, cache or container)."""
    inputs, call = make()
    listed = _listed(inputs)
    snapshot = [(name, a, a.copy()) for name, a in listed]
    with learner_code(path, doing):
        ret = call()
    bad = changed(snapshot)
    if bad:
        raise ChangedInput(_message(doing, bad, _line(make, path, doing, set(bad))))
    return ret


def _line(make, path: str | None, doing: str, bad: set) -> str:
    """Where the learner's file writes into the input: the call run again with the
    inputs read-only, the line of the write that then raises; "" if none is found."""
    if not path:
        return ""
    inputs, call = make()
    listed = _listed(inputs)
    try:
        with read_only([(n, a) for n, a in listed if n in bad]), backend.np.errstate(all="ignore"):
            call()
    except Exception as e:  # the write into a read-only array, or whatever else it does
        if "read-only" in str(e):  # raised here, or said by the learner's process
            at = getattr(e, "at", None) or where_in(path, e.__traceback__)
            if at is not None:
                return f"{shown(path)}, line {at[0]}"
    return ""


def _message(doing: str, bad: list, line: str) -> str:
    which = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    where = f" ({line})" if line else ""
    return (
        f"{doing} changed {which}, an input it must only read{where}: the model reads it "
        "after you (another path of the gradient, the next step), so right numbers here "
        "are wrong ones in training; write into a new array (dx = dout * mask, not "
        "dout *= mask)"
    )


__all__ = ["ChangedInput", "arrays", "changed", "guarded", "read_only"]
