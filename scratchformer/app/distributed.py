"""Data parallelism over MPI: N processes ("ranks") train one model as one process would.

    mpiexec -n 2 scratchformer train --config bible-cpu      # or: scratchformer train --ranks 2

Every rank holds the whole model and the same parameters. At each optimizer step every
rank takes its share of every token-budget batch (sentences ``r, r + N, r + 2N, ...`` of
the batch, so the shares together are exactly the one-process batch), back-propagates
the *summed* loss of its share, and then one all-reduce sums the flat gradients and the
counts of every rank:

    g = (1 / n) sum_r sum_{t in share r} d loss_t,      n = sum_r n_r   (all targets)

which is the gradient of the mean loss over the whole batch (docs/derivations.md,
"Data parallelism"). Every rank then takes the same Adam step from the same gradient,
so the parameters stay equal without being sent. Rank 0 alone writes: the log, the
progress bar, the checkpoints and the test results. The test set's decoding is shared:
each rank decodes its share of the sentences and ``allgather`` gives every rank all the
outputs.

A rank that fails prints one line naming itself and aborts the whole job
(``MPI_Abort``): the others never wait forever in a collective. A rank killed from
outside is reported by mpiexec, which stops the rest.

mpi4py is imported only when the process was started by an MPI launcher with more than
one process; a single process needs no MPI at all.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time

from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError

#: what to install for more than one process
EXTRA = "pip install 'scratchformer[mpi]'"
#: the variables by which MPI launchers (MPICH's and Intel's hydra, Slurm's srun with
#: PMI, Open MPI) tell a process how many there are. (Not SLURM_NTASKS: a batch script
#: has it too, outside any launcher.)
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


class DistributedError(ScratchformerError):
    """More than one process cannot run as asked (no mpi4py, the GPU, a resume)."""


def launched_size() -> int:
    """How many processes the MPI launcher started (1 when there is no launcher)."""
    for var in _SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


class World:
    """The processes of one run and the few collectives training needs.

    ``World()`` is the single process: every collective returns its input. ``rank`` is
    this process's number, ``size`` how many there are.
    """

    rank, size = 0, 1
    comm = None
    #: called (without arguments) by ``abort`` before the job ends: what a rank must undo
    #: for the others, which end without a word (rank 0's lock, by another rank)
    before_abort: tuple | list = ()

    @property
    def main(self) -> bool:
        """Whether this process is rank 0, the one that writes."""
        return self.rank == 0

    def describe(self) -> str:
        return f"rank {self.rank} of {self.size}"

    def sum_(self, a):
        """Replace the array ``a`` by its sum over all ranks, in place; returns ``a``."""
        return a

    def sum_floats(self, values) -> list[float]:
        """The sum over all ranks of each of a few numbers."""
        return [float(v) for v in values]

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank (a small Python value)."""
        return obj

    def broadcast_(self, a):
        """Overwrite the array ``a`` with rank 0's, in place; returns ``a``."""
        return a

    def allgather(self, obj) -> list:
        """Every rank's ``obj`` (a Python value), in rank order, on every rank."""
        return [obj]

    def check_equal(self, a, what: str) -> None:
        """Raise when the array ``a`` differs in any bit between ranks."""

    def abort(self, code: int) -> None:
        """End every rank (the single process simply exits)."""
        sys.exit(code)


class MPIWorld(World):
    """``World`` over ``mpi4py``'s ``COMM_WORLD``, arrays summed and sent in place.

    A device array (CuPy) goes through host memory: copied to the host (which waits for
    the GPU's work on it to finish), reduced or sent there, and copied back. The MPI
    builds on PyPI are not CUDA-aware, and NCCL refuses two ranks on one GPU."""

    def __init__(self, MPI):
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        sys.excepthook = self._abort_on_exception
        self.before_abort = []

    def _abort_on_exception(self, kind, value, tb) -> None:
        """An exception nobody caught (a script using the API): the traceback, then the
        end of every rank instead of the others waiting forever."""
        sys.__excepthook__(kind, value, tb)
        self.abort(1)

    def sum_(self, a):
        host = self._host(a)
        self.comm.Allreduce(self.MPI.IN_PLACE, host, op=self.MPI.SUM)
        return self._back(a, host)

    @staticmethod
    def _host(a):
        """``a`` itself on the host; a device array's copy in host memory (the copy waits
        for the device's work on ``a``)."""
        return a if backend.on_host(a) else backend.asnumpy(a)

    @staticmethod
    def _back(a, host):
        """Write ``host`` back into the device array ``a`` (nothing for a host array)."""
        if host is not a:
            a[...] = backend.asarray(host)
        return a

    def sum_floats(self, values) -> list[float]:
        buf = backend.np.array(values, dtype=backend.np.float64)
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        return [float(v) for v in buf]

    def broadcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def broadcast_(self, a):
        host = self._host(a)
        self.comm.Bcast(host, root=0)
        return self._back(a, host)

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def check_equal(self, a, what: str) -> None:
        digest = hashlib.sha256(backend.asnumpy(a).tobytes()).hexdigest()
        digests = self.comm.allgather(digest)
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        if differ:
            raise DistributedError(
                f"the {what} of rank {differ[0]} differ from rank 0's: the ranks no longer "
                "train one model (an MPI reduction that is not the same on every rank?)"
            )

    def abort(self, code: int) -> None:
        for undo in self.before_abort:
            undo()
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.2)  # let mpiexec forward the last line before the job is torn down
        self.comm.Abort(code)


_WORLD: World | None = None
#: the variables by which MPI launchers tell a process its rank
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK")


def launched_rank() -> int | None:
    """This process's rank as the MPI launcher tells it (None when it does not)."""
    value = next((os.environ[v] for v in _RANK_VARS if os.environ.get(v, "").isdigit()), None)
    return None if value is None else int(value)


def rank_label() -> str:
    """' (rank r of N)' in a process started by an MPI launcher with N > 1, else ''
    (read from the launcher's variables: it works before and without mpi4py)."""
    n = launched_size()
    if n <= 1:
        return ""
    rank = next((os.environ[v] for v in _RANK_VARS if os.environ.get(v, "").isdigit()), "?")
    return f" (rank {rank} of {n})"


def current() -> World | None:
    """The world made by ``world()``, or None before (or without) one."""
    return _WORLD


def world() -> World:
    """The processes of this run: ``World()`` alone, ``MPIWorld`` under an MPI launcher
    with more than one process (mpi4py imported then, and only then)."""
    global _WORLD
    if _WORLD is None:
        n = launched_size()
        if n <= 1:
            _WORLD = World()
        else:
            try:
                from mpi4py import MPI
            except ImportError:
                raise DistributedError(
                    f"started by an MPI launcher with {n} processes, but mpi4py is not "
                    f"installed: {EXTRA}"
                ) from None
            _WORLD = MPIWorld(MPI)
    return _WORLD


def find_mpiexec() -> str | None:
    """mpiexec next to this Python (the ``mpi`` extra installs it there), else on PATH."""
    here = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return shutil.which("mpiexec", path=here)


def missing_mpi4py() -> bool:
    return importlib.util.find_spec("mpi4py") is None


def launch(n: int, argv: list[str]) -> int:
    """Run ``scratchformer <argv>`` as ``n`` processes: ``mpiexec -n n`` with this Python;
    returns mpiexec's exit code.

    Signals reach the ranks through this process alone: mpiexec runs in a session of its
    own (so Ctrl-C in a terminal is not delivered to it twice, once from the terminal and
    once from here), without stdin, and is sent SIGTERM should this process die. The first
    Ctrl-C or SIGTERM is passed on as it is (mpiexec forwards it to every rank: each
    finishes its step, rank 0 saves); later ones as SIGTERM, which mpiexec forwards every
    time, where a second SIGINT would be its own forced abort (SIGKILL, nothing saved)."""
    exe = find_mpiexec()
    if exe is None:
        raise DistributedError(f"{n} processes need mpiexec, which is not installed: {EXTRA}")
    if missing_mpi4py():
        raise DistributedError(f"{n} processes need mpi4py, which is not installed: {EXTRA}")
    cmd = [exe, "-n", str(n), sys.executable, "-m", "scratchformer", *argv]
    p = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_end_with_parent
    )
    received: list[int] = []

    def forward(signum, frame):
        received.append(signum)
        p.send_signal(signum if len(received) == 1 else signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = p.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code


def _end_with_parent() -> None:
    """In mpiexec, before it starts (Linux): SIGTERM when the launching process dies, so
    that a launcher killed outright leaves no job running; elsewhere nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def share(indices, w: World):
    """This rank's share of a batch: entries ``rank, rank + size, ...`` of ``indices``.

    A token-budget batch holds sentences of similar length, so every share gets about
    ``1/size`` of its tokens; the shares of all ranks together are the batch.
    """
    return indices[w.rank :: w.size]


__all__ = [
    "EXTRA",
    "DistributedError",
    "MPIWorld",
    "World",
    "current",
    "find_mpiexec",
    "launch",
    "launched_rank",
    "launched_size",
    "missing_mpi4py",
    "rank_label",
    "share",
    "world",
]
