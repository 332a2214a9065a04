"""Wall time of the gradient checker (the proof every optimisation is re-run against).

    python benchmarks/gradcheck_time.py

Times ``scratchformer gradcheck`` (the tiny model, post-LN and pre-LN, every parameter on
a seeded sample of 20 entries, dropout replayed) and ``check_model`` on the tiny model
with memory-efficient attention. Prints seconds and the largest relative error; exits
non-zero if a check fails (a correctness failure, never a timing one).
"""

from __future__ import annotations

import time

from scratchformer.app.cli import main as cli_main
from scratchformer.app.commands.gradcheck import demo_batch
from scratchformer.engine.gradcheck import check_model
from scratchformer.engine.models import Transformer, TransformerConfig


def main() -> int:
    t0 = time.perf_counter()
    code = cli_main(["gradcheck"])
    t_cli = time.perf_counter() - t0
    cfg = TransformerConfig.preset("tiny", vocab_size=23, attention_block=2)
    t0 = time.perf_counter()
    report = check_model(Transformer(cfg), *demo_batch(23), rng=1)
    t_block = time.perf_counter() - t0
    print(f"scratchformer gradcheck (post + pre):      {t_cli:6.2f} s, exit code {code}")
    print(
        f"check_model, tiny, attention_block=2:      {t_block:6.2f} s, "
        f"max rel error {report.max_rel_error:.1e}, {'passed' if report.passed else 'FAILED'}"
    )
    return 0 if code == 0 and report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
