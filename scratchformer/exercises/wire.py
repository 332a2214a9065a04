"""What passes between the checker and the process that runs a learner's code.

    checker -> learner   request(obj) / read_request(data): pickled (the learner's
                         process trusts the checker); an op's implementation in a cache
                         travels as its table's name and its own, and is looked up there
    learner -> checker   reply(obj, aliases) / read_reply(data): never pickled, so
                         nothing the learner's process sends can run code in the checker

A reply is plain data: None, bools, ints, floats, strings, tuples, lists, dicts with
string keys, and arrays of numbers (bool, int, uint, float, complex). The structure is
JSON; each array is its dtype, shape and raw bytes, checked on arrival (a known dtype,
the bytes its shape needs) and copied into an array of the checker's own. Anything else
the learner's code returned arrives as an ``Opaque`` object named after its type (so the
checker can say "returned a float64 for dx, not an array"); an input array the code
returned itself travels as ``Alias(name)``, which the checker replaces by its own array.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import re
import struct

from scratchformer.engine import backend, dispatch
from scratchformer.engine.backend import np
from scratchformer.exercises.spec import LearnerError

#: the largest message either way (a larger one from the learner's process is refused)
MAX_MESSAGE = 1 << 30
#: how deep the learner's result may nest
MAX_DEPTH = 40
HEADER = struct.Struct("<Q")
_DTYPE = re.compile(r"^[<>|=]?[biufc][0-9]{1,2}$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,79}$")


class WireError(Exception):
    """A reply that is not plain data of the agreed form."""


class Opaque:
    """A value of a type that does not travel (``type(x).__name__`` is that type's name)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} from your code>"


_OPAQUE: dict = {}


def opaque(name: str) -> Opaque:
    if not _NAME.match(name):
        name = "object"
    if name not in _OPAQUE:
        _OPAQUE[name] = type(name.rpartition(".")[2], (Opaque,), {})
    return _OPAQUE[name]()


class Alias:
    """The learner's code returned one of its inputs itself: the input named ``name``."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


# -- checker -> learner ------------------------------------------------------------------
def _implementations() -> dict:
    return {id(impl): (op.name, impl.name)
            for op in dispatch.TABLES.values() for impl in op.implementations()}


class _Pickler(pickle.Pickler):
    def __init__(self, f):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.known = None

    def persistent_id(self, obj):
        if not isinstance(obj, dispatch.Implementation):
            return None
        if self.known is None or id(obj) not in self.known:
            self.known = _implementations()
        if id(obj) not in self.known:
            raise pickle.PicklingError(f"an implementation in no table: {obj.name}")
        return ("impl", *self.known[id(obj)])


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        kind, op, name = pid
        return dispatch.table(op).get(name)


def request(obj) -> bytes:
    f = io.BytesIO()
    _Pickler(f).dump(obj)
    return f.getvalue()


def read_request(data: bytes):
    return _Unpickler(io.BytesIO(data)).load()


# -- learner -> checker ------------------------------------------------------------------
def reply(obj) -> bytes:
    """``obj`` as plain data (an ``Alias`` as itself)."""
    buffers: list = []

    def tree(x, depth):
        if depth > MAX_DEPTH:
            return {"o": "object"}
        if x is None or type(x) in (bool, int, str):
            return x
        if type(x) is float:
            return {"f": repr(x)}  # inf and nan too, exactly
        if isinstance(x, Alias):
            return {"r": x.name}
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in "biufc":
                return {"o": f"array of dtype {x.dtype}"}
            data = np.ascontiguousarray(x).tobytes()
            buffers.append(data)
            return {"a": [x.dtype.str, list(x.shape), len(data)]}
        if isinstance(x, tuple):
            return {"t": [tree(v, depth + 1) for v in x]}
        if type(x) is list:
            return {"l": [tree(v, depth + 1) for v in x]}
        if type(x) is dict and all(type(k) is str for k in x):
            return {"d": [[k, tree(v, depth + 1)] for k, v in x.items()]}
        return {"o": type(x).__name__}

    head = json.dumps(tree(obj, 0)).encode()
    return HEADER.pack(len(head)) + head + b"".join(buffers)


def read_reply(data: bytes):
    """The value a reply holds, every array a new one of the checker's; WireError if it
    is not plain data of the agreed form."""
    if len(data) < HEADER.size:
        raise WireError("a reply shorter than its header")
    (n,) = HEADER.unpack_from(data)
    if n > len(data) - HEADER.size:
        raise WireError("a reply shorter than it says")
    try:
        head = json.loads(data[HEADER.size : HEADER.size + n].decode())
    except (ValueError, RecursionError) as e:
        raise WireError(f"a reply that is not JSON ({type(e).__name__})") from None
    at = [HEADER.size + n]

    def value(x, depth):
        if depth > MAX_DEPTH + 1:
            raise WireError("a reply nested too deep")
        if x is None or type(x) in (bool, int, str):
            return x
        if type(x) is not dict or len(x) != 1:
            raise WireError("a reply of an unknown form")
        ((kind, v),) = x.items()
        if kind == "f" and type(v) is str:
            return float(v)
        if kind == "a":
            return _array(data, at, v)
        if kind == "t" and type(v) is list:
            return tuple(value(e, depth + 1) for e in v)
        if kind == "l" and type(v) is list:
            return [value(e, depth + 1) for e in v]
        if kind == "d" and type(v) is list:
            out = {}
            for pair in v:
                if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
                    raise WireError("a reply's dict of an unknown form")
                out[pair[0]] = value(pair[1], depth + 1)
            return out
        if kind == "r" and type(v) is str:
            return Alias(v)
        if kind == "o" and type(v) is str:
            return opaque(v)
        raise WireError("a reply of an unknown form")

    try:
        found = value(head, 0)
    except RecursionError:
        raise WireError("a reply nested too deep") from None
    if at[0] != len(data):
        raise WireError("a reply with bytes left over")
    return found


def _array(data: bytes, at: list, v):
    if type(v) is not list or len(v) != 3:
        raise WireError("an array of an unknown form")
    dtype, shape, nbytes = v
    if type(dtype) is not str or not _DTYPE.match(dtype):
        raise WireError(f"an array of dtype {str(dtype)[:20]!r}")
    if (type(shape) is not list or len(shape) > 32
            or not all(type(d) is int and 0 <= d < 1 << 40 for d in shape)):
        raise WireError("an array of an impossible shape")
    dt = np.dtype(dtype)
    count = 1
    for d in shape:
        count *= d
    if type(nbytes) is not int or nbytes != count * dt.itemsize or at[0] + nbytes > len(data):
        raise WireError("an array whose bytes do not fill its shape")
    a = np.frombuffer(data, dtype=dt, count=count, offset=at[0]).reshape(shape).copy()
    at[0] += nbytes
    return backend.asarray(a) if backend.backend_name() != "numpy" else a


# -- the arrays a call was given --------------------------------------------------------
def slots(args, kwargs) -> dict:
    """``{name: (array, parent, key)}`` of every array a call was given, named by where it
    is (``arg1.x``, ``arg0.grads.W_q``, ``kw.g``): the same names in the checker and in
    the learner's process, so what the learner's code wrote into its copies can be
    written into the checker's arrays. ``parent[key]`` (or its attribute ``key[1]`` when
    ``key`` is ``("attr", name)``) holds the array; parent None: it cannot be replaced."""
    found: dict = {}
    seen: set = set()

    def walk(x, name, parent, key, depth):
        if depth > 8 or x is None or isinstance(x, (str, bytes, int, float, bool)):
            return
        if isinstance(x, np.ndarray) or backend.is_array(x):
            if id(x) not in seen:
                seen.add(id(x))
                found[name] = (x, parent, key)
            return
        if hasattr(x, "named_modules") and hasattr(x, "params"):  # a Module
            for mname, m in x.named_modules():
                for label, store in (("params", m.params), ("grads", m.grads)):
                    for k, a in store.items():
                        walk(a, f"{name}.{label}.{mname + '.' if mname else ''}{k}", store, k,
                             depth + 1)
        elif isinstance(x, dispatch.Cache):
            walk(x.value, f"{name}.value", None, None, depth + 1)
        elif isinstance(x, tuple) and hasattr(x, "_fields"):
            for field, v in zip(x._fields, x):
                walk(v, f"{name}.{field}", None, None, depth + 1)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            frozen = x.__dataclass_params__.frozen
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name, None), f"{name}.{f.name}",
                     None if frozen else x, ("attr", f.name), depth + 1)
        elif isinstance(x, tuple):
            for i, v in enumerate(x):
                walk(v, f"{name}[{i}]", None, None, depth + 1)
        elif isinstance(x, (list, dict)):
            for k, v in (x.items() if isinstance(x, dict) else enumerate(x)):
                walk(v, f"{name}[{k!r}]", x, k, depth + 1)

    for i, a in enumerate(args):
        walk(a, f"arg{i}", None, None, 0)
    for k, a in kwargs.items():
        walk(a, f"kw.{k}", None, None, 0)
    return found


def differs(a, before) -> bool:
    """``a`` is no longer what ``before`` (a copy of it) was: shape, dtype or an entry."""
    if a.shape != before.shape or a.dtype != before.dtype:
        return True
    return not bool(np.array_equal(a, before, equal_nan=a.dtype.kind in "fc"))


def put(slot: tuple, value) -> bool:
    """Replace the array of ``slot`` (``(array, parent, key)``) by ``value`` in its
    parent; False where it cannot be replaced."""
    _, parent, key = slot
    if parent is None:
        return False
    if isinstance(key, tuple) and key[:1] == ("attr",):
        setattr(parent, key[1], value)
    else:
        parent[key] = value
    return True


def write_back(function: str, given: dict, changed: dict, gone: list) -> None:
    """Into the checker's arrays, what the learner's code wrote into its copies."""
    if gone:
        raise LearnerError(f"{function} removed {gone[0]} from what it was given")
    for name, new in changed.items():
        slot = given.get(name)
        if slot is None:
            continue
        if isinstance(new, Alias):
            new = given[new.name][0] if new.name in given else None
        a = slot[0]
        if (isinstance(new, np.ndarray) and isinstance(a, np.ndarray) and new.shape == a.shape
                and new.dtype == a.dtype):
            if a.flags.writeable:
                np.copyto(a, new)
        elif not put(slot, new):
            raise LearnerError(f"{function} changed the shape or dtype of {name}, which it "
                               "was given to read")


def resolve(x, given: dict):
    """The learner's result with each input it returned itself made the checker's."""
    if isinstance(x, Alias):
        if x.name not in given:
            raise LearnerError("your code's process named an input it was not given")
        return given[x.name][0]
    if isinstance(x, tuple):
        return tuple(resolve(v, given) for v in x)
    if isinstance(x, list):
        return [resolve(v, given) for v in x]
    return x


__all__ = ["MAX_MESSAGE", "Alias", "Opaque", "WireError", "differs", "put", "read_reply",
           "read_request", "reply", "request", "resolve", "slots", "write_back"]
