"""The data-parallel side of tests/distributed/test_data_parallel.py, run by
``mpiexec -n 2 python mpi_worker.py CONFIGS.json OUT_DIR``: for each config, five
optimizer steps in float64 (rank 0 writes ``OUT_DIR/<task>.npz``). The test runs the
same ``five_steps`` in one process and compares."""

import json
import sys
from pathlib import Path

import numpy as np

from scratchformer.app.train import TrainConfig, Trainer
from scratchformer.engine import backend as B


def five_steps(cfg: dict, world=None) -> dict:
    """Five steps of ``cfg`` (float64; the caller turns dropout and clipping off):
    the loss and the flat gradient of the first step, every step's loss, the flat
    parameters and both Adam moments after the fifth."""
    with B.precision("float64"):
        tr = Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None, world=world)
        try:
            out, losses = {}, []
            for s in range(5):
                rec = tr.train_step()
                if s == 0:
                    out["grads"] = B.asnumpy(tr.flat.grads).copy()
                tr.window.add(rec)  # the loss stays on the device until read: as the loop does
                losses += [r[1] for r in tr.window.flush(world)]
            out["losses"] = np.array(losses)
            out["tokens"] = np.array(tr.tokens_seen)
            out["params"] = B.asnumpy(tr.flat.params).copy()
            out["m"] = B.asnumpy(tr.stepper.optimizer.m).copy()
            out["v"] = B.asnumpy(tr.stepper.optimizer.v).copy()
            return out
        finally:
            if tr.lock:
                tr.lock.release()


if __name__ == "__main__":
    from scratchformer.app import distributed

    configs, out_dir = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    w = distributed.world()
    for task, cfg in configs.items():
        result = five_steps(cfg, w)
        if w.main:
            np.savez(out_dir / f"{task}.npz", ranks=w.size, **result)
