"""Zip bombs: small checkpoint files whose arrays inflate to gigabytes are refused from
the headers (the zip directory, each member's .npy header, the JSON header, the model the
config describes, the memory available) before their data is read.

Each bomb is a few MB: a deflate stream of 2 GiB of zeros (one compressed chunk repeated
after full flushes). Each command runs in a subprocess, alone under a watcher process, so
that the watcher's RUSAGE_CHILDREN is the loader's peak memory; it must stay under
100 MB (loading the same file the old way, every member inflated, took 2.1 GB and 8 s).
"""

import io
import json
import struct
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest

P = "model/embed.E"


@pytest.fixture
def good(tiny_checkpoint):
    """The checkpoint every case starts from (tests/faults/conftest.py)."""
    return tiny_checkpoint


def _header(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return json.loads(z["__meta__"].tobytes())


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


GIB = 2**30
CHUNK = bytes(2**24)


def _deflated(head: bytes, n: int) -> tuple[bytes, int]:
    """``head`` then ``n`` zero bytes (a multiple of 16 MiB), raw-deflated, and their CRC-32:
    after a full flush the compressor starts afresh, so one compressed chunk of zeros is
    repeated instead of compressing gigabytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    zeros = c.compress(CHUNK) + c.flush(zlib.Z_FULL_FLUSH)
    stream = first + zeros * (n // len(CHUNK)) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(n // len(CHUNK)):
        crc = zlib.crc32(CHUNK, crc)
    return stream, crc


def _npy_head(shape, descr) -> bytes:
    buf = io.BytesIO()
    fields = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, fields)
    return buf.getvalue()


def _raw_zip(path, members):
    """A zip of ``members`` ``(name, method, data, crc, size)`` written as given (``data``
    already compressed, ``size`` what the directory says it inflates to)."""
    central = b""
    with open(path, "wb") as f:
        for name, method, data, crc, size in members:
            n, offset = name.encode(), f.tell()
            sizes = (method, 0, 0x21, crc, len(data), size, len(n))
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, *sizes, 0) + n + data)
            central += struct.pack(
                "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, *sizes, *[0] * 5, offset
            )
            central += n
        end = (len(members), len(members), len(central), f.tell(), 0)
        f.write(central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, *end))
    return path


def _bomb(good, path, *, declared, inflates, listed, claims=None, claims_crc=True, meta_bomb=False):
    """``good`` with ``model/embed.E`` replaced: its .npy header ``declared`` (a shape),
    its data ``inflates`` zero bytes, the zip directory ``claims`` a size (default: the
    true one) and a CRC-32 (with ``claims_crc``: that of the claimed bytes), the JSON
    header ``listed`` (a shape)."""
    header = _header(good)
    header["arrays"][P] = [list(listed), "float32"]
    blob = json.dumps(header).encode()
    with zipfile.ZipFile(good) as zf:
        members = [(i.filename, 0, zf.read(i), i.CRC, i.file_size) for i in zf.infolist()]
    members = [m for m in members if m[0] not in (P + ".npy", "__meta__.npy")]
    head = _npy_head(tuple(declared), "<f4")
    data, crc = _deflated(head, inflates)
    if claims and claims_crc:  # the CRC-32 of what the claimed size holds: it checks out
        crc = zlib.crc32((head + bytes(claims))[:claims])
    members.append((P + ".npy", 8, data, crc, claims or len(head) + inflates))
    if meta_bomb:  # a __meta__ that inflates to 117 MB
        head = _npy_head((7 * len(CHUNK),), "|u1")
        data, crc = _deflated(head, 7 * len(CHUNK))
        members.append(("__meta__.npy", 8, data, crc, len(head) + 7 * len(CHUNK)))
    else:
        meta = _npy(np.frombuffer(blob, dtype=np.uint8))
        members.append(("__meta__.npy", 0, meta, zlib.crc32(meta), len(meta)))
    return _raw_zip(path, members)


BIG = (2**27, 4)  # 2 GiB of float32; the model's embed.E is (14, 16)
BOMBS = {  # id: (how it is built, what the one line says)
    "consistent": (dict(declared=BIG, inflates=2 * GIB, listed=BIG), "shapes do not match"),
    "small-inflates-big": (
        dict(declared=(14, 16), inflates=2 * GIB, listed=(14, 16)),
        "declares float32[14, 16] (896 B) but its zip entry inflates to 2.1 GB",
    ),
    "directory-claims-little": (
        dict(declared=BIG, inflates=2 * GIB, listed=BIG, claims=1024),
        "declares float32[134217728, 4] (2.1 GB) but its zip entry inflates to 1.0 KB",
    ),
    "directory-claims-little-bad-crc": (
        dict(declared=BIG, inflates=2 * GIB, listed=BIG, claims=1024, claims_crc=False),
        "truncated or corrupted (BadZipFile: Bad CRC-32",
    ),
    "big-header": (
        dict(declared=BIG, inflates=2 * GIB, listed=BIG, meta_bomb=True),
        "its __meta__ header is 117.4 MB, more than the 67.1 MB a header may be",
    ),
    "over-the-memory": (
        dict(declared=BIG, inflates=2 * GIB, listed=BIG),
        "its arrays (183 of them) need 2.1 GB, more than the 1.1 GB of memory available",
    ),
}

LOADER = """
import sys
from scratchformer.engine import memory
from scratchformer.app.cli import main
if sys.argv[1] == "--memory":
    free = int(sys.argv[2])
    memory.available_memory = lambda: free
    del sys.argv[1:3]
sys.exit(main(sys.argv[1:]))
"""
# runs the loader as its only child: RUSAGE_CHILDREN is then the loader's peak alone
WATCH = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": p.returncode, "err": p.stderr, "seconds": time.perf_counter() - t,
                  "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


@pytest.fixture(scope="module")
def bombs(tiny_checkpoint, tmp_path_factory):
    d = tmp_path_factory.mktemp("bombs")
    return {k: _bomb(tiny_checkpoint, d / f"{k}.npz", **kw) for k, (kw, _) in BOMBS.items()}


def test_the_bomb_is_a_real_one(bombs):
    """The consistent bomb is a valid zip whose member really inflates to 2 GiB (the
    first 64 MiB read back as zeros) from a file of a few MB."""
    path = bombs["consistent"]
    assert path.stat().st_size < 4 * 2**20
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(P + ".npy")
        assert info.file_size > 2 * GIB
        with zf.open(info) as f:
            assert np.lib.format.read_magic(f) == (1, 0)
            assert np.lib.format.read_array_header_1_0(f)[0] == BIG
            assert not any(f.read(64 * 2**20))


@pytest.mark.parametrize("command", ["translate", "average", "resume"])
@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_zip_bomb_is_refused_in_bounded_memory(good, bombs, tmp_path, bomb, command):
    path = bombs[bomb]
    src = tmp_path / "src.txt"
    src.write_text("abc\n", encoding="utf-8")
    argv = {
        "translate": ["translate", "--checkpoint", str(path), "--input", str(src)],
        "average": ["average", str(good), str(path), "-o", str(tmp_path / "avg.npz")],
        "resume": ["train", "--resume", str(path), "--run-dir", str(tmp_path / "run")],
    }[command]
    memory = ["--memory", str(GIB + 2**26)] if bomb == "over-the-memory" else []
    loader = [sys.executable, "-c", LOADER, *memory, *argv]
    proc = subprocess.run(
        [sys.executable, "-c", WATCH, *loader], capture_output=True, text=True, timeout=300
    )
    result = json.loads(proc.stdout)
    lines = result["err"].strip().splitlines()
    assert result["rc"] == 2 and len(lines) == 1, result["err"]
    assert str(path) in lines[0] and BOMBS[bomb][1] in lines[0], lines[0]
    assert result["peak_kib"] < 100 * 1024, result
    print(f"{bomb} {command}: peak {result['peak_kib'] / 1024:.0f} MiB, {result['seconds']:.2f} s")
