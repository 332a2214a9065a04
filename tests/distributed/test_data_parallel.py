"""Data parallelism is exact: 2 ranks under mpiexec take the steps of one process on the
union of their shares (float64, dropout off): the loss and the gradient of the first
step to 1e-12, every loss and the parameters and moments after five Adam steps to 1e-12,
for every task. Skipped, with the reason, only where MPI cannot start."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_worker import five_steps
from task_data import TASK_NAMES, run_config

from scratchformer.app import distributed
from scratchformer.app.train import accumulate_gradients
from scratchformer.engine import backend as B

HERE = Path(__file__).resolve().parent


def relative_error(a, b) -> float:
    """max|a - b| / max|b|, per tensor (0 for two zero tensors)."""
    scale = float(np.max(np.abs(b))) if np.size(b) else 0.0
    return float(np.max(np.abs(a - b))) / scale if scale else float(np.max(np.abs(a)))


def _configs(root: Path, tasks) -> dict:
    """A config per task (data written under root/<task>), dropout and clipping off, two
    micro-batches per step so that accumulation and sharding meet."""
    out = {}
    for task in tasks:
        d = run_config(task, root / task, steps=5, accum_steps=2, max_tokens=64)
        d["model"].update(P_drop=0.0, P_drop_attn=0.0, P_drop_ffn=0.0)
        d["optim"]["clip_norm"] = 0.0
        out[task] = d
    return out


@pytest.fixture(scope="module")
def mpi_results(tmp_path_factory):
    """The 2-rank results per task, computed by one mpiexec run."""
    mpiexec = distributed.find_mpiexec()
    if mpiexec is None or distributed.missing_mpi4py():
        pytest.skip(f"no MPI here ({distributed.EXTRA})")
    root = tmp_path_factory.mktemp("dp")
    tasks = [t for t in TASK_NAMES if t != "translate" or _has_sentencepiece()]
    configs = _configs(root / "mpi", tasks)
    path = root / "configs.json"
    path.write_text(json.dumps(configs))
    out = root / "out"
    out.mkdir()
    cmd = [mpiexec, "-n", "2", sys.executable, str(HERE / "mpi_worker.py"), str(path), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=HERE.parent)
    if proc.returncode != 0 and not list(out.iterdir()):
        probe = subprocess.run(
            [mpiexec, "-n", "2", sys.executable, "-c", "pass"], capture_output=True
        )
        if probe.returncode != 0:
            pytest.skip(f"mpiexec cannot start 2 processes here: {probe.stderr.decode()[-200:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, {t: dict(np.load(out / f"{t}.npz")) for t in tasks}


def _has_sentencepiece() -> bool:
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("task", TASK_NAMES)
def test_two_ranks_take_the_steps_of_one_process(mpi_results, task):
    root, results = mpi_results
    if task not in results:
        pytest.skip("sentencepiece is not installed (the bpe extra)")
    got = results[task]
    want = five_steps(_configs(root / "one", [task])[task])
    assert int(got["ranks"]) == 2
    assert int(got["tokens"]) == int(want["tokens"])  # the shares together are the batches
    errors = {k: relative_error(got[k], want[k]) for k in ("losses", "grads", "params", "m", "v")}
    assert all(e <= 1e-12 for e in errors.values()), errors


def test_an_empty_share_adds_nothing(f64):
    """A rank whose share of a micro-batch is empty (None) adds nothing to the sum."""
    from scratchformer.app.train.tasks.seq2seq import pair_batch
    from scratchformer.engine.models import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.preset("tiny", vocab_size=12, P_drop=0.0))
    pairs = [([4, 5, 6], [7, 8]), ([9, 10], [11])]
    batch = pair_batch(pairs, [0, 1])
    alone = accumulate_gradients(model, [batch])
    g = B.asnumpy(model.flat.grads).copy()
    assert accumulate_gradients(model, [None, batch]) == alone
    np.testing.assert_array_equal(B.asnumpy(model.flat.grads), g)
