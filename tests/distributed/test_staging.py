"""The all-reduce of device arrays goes through host memory (the MPI wheels are not
CUDA-aware): checked on a stand-in device (tests/perf/host_reads.py) with a stand-in
communicator of two ranks, no MPI needed."""

import sys
from pathlib import Path

import numpy as np

from scratchformer.app.distributed import MPIWorld
from scratchformer.engine import backend as B

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "perf"))
from host_reads import DeviceArray, recording  # noqa: E402


class TwoRanks:
    """Allreduce as if a second rank held the same values; Bcast as if rank 0 held 7s."""

    def Allreduce(self, inplace, buf, op):
        assert type(buf) is np.ndarray  # a host buffer reaches MPI
        buf *= 2

    def Bcast(self, buf, root):
        assert type(buf) is np.ndarray
        buf[...] = 7


def world():
    w = MPIWorld.__new__(MPIWorld)
    w.MPI, w.comm, w.rank, w.size = (
        type("MPI", (), {"IN_PLACE": None, "SUM": None}),
        TwoRanks(),
        0,
        2,
    )
    return w


def test_a_device_array_is_summed_through_the_host_and_written_back(monkeypatch):
    with recording(monkeypatch) as reads:
        a = B.asarray(np.arange(6.0))
        assert isinstance(a, DeviceArray)
        out = world().sum_(a)
        assert out is a and isinstance(a, DeviceArray)
        np.testing.assert_array_equal(a.view(np.ndarray), 2 * np.arange(6.0))
        assert reads == [reads[0]] and reads[0].startswith("transfer to NumPy")
        world().broadcast_(a)
        np.testing.assert_array_equal(a.view(np.ndarray), np.full(6, 7.0))


def test_a_host_array_is_summed_in_place():
    a = np.arange(4.0)
    assert world().sum_(a) is a
    np.testing.assert_array_equal(a, 2 * np.arange(4.0))
