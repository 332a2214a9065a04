"""float16 against float32 on NumPy: the default task (configs/reverse.toml), 150 steps
each, no test, the two precisions alternated twice; CPU time of this process (one BLAS
thread) and wall time of the training alone (the Trainer's run without the final
evaluation)."""

import sys
import tempfile
import time

from scratchformer.train import TrainConfig, Trainer

rows = []
for rnd in range(2):
    for precision in ("float32", "float16"):
        cfg = TrainConfig.default()
        with tempfile.TemporaryDirectory() as d:
            d0 = cfg.to_dict()
            d0["train"].update(steps=150, precision=precision, test=False)
            d0["run_dir"] = d + "/run"
            c = TrainConfig.from_dict(d0)
            tr = Trainer(c, progress=False, echo=lambda *a, **k: None)
            w0, c0 = time.perf_counter(), time.process_time()
            tr.run(final_eval=False)
            rows.append((precision, time.perf_counter() - w0, time.process_time() - c0))
            _, wall, cpu = rows[-1]
            print(f"round {rnd + 1} {precision}: wall {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
for k, name in ((1, "wall"), (2, "CPU")):
    f32 = sum(r[k] for r in rows if r[0] == "float32")
    f16 = sum(r[k] for r in rows if r[0] == "float16")
    print(f"float16 / float32, {name} time: {f16 / f32:.2f}x")
sys.exit(0)
