"""A run's TensorBoard event files read back with TensorBoard's own reader
(``EventAccumulator``), against the run's metrics.jsonl: every scalar tag with its steps
(each once, though the run was killed and resumed), the attention images, the text.

    python benchmarks/results/2026-11-28/best-checkpoint/tensorboard_readback.py RUN_DIR
"""

import json
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main(run: Path) -> int:
    files = sorted(p.name for p in run.iterdir() if p.name.startswith("events.out.tfevents."))
    print(f"event files in {run}: {files}")
    ea = EventAccumulator(str(run), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    ea.Reload()
    tags = ea.Tags()
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    want = {"train": [r["step"] for r in recs if r["kind"] == "train"],
            "dev": [r["step"] for r in recs if r["kind"] == "valid"]}
    bad = 0
    for tag in tags["scalars"]:
        events = ea.Scalars(tag)
        steps = [e.step for e in events]
        group = tag.split("/")[0]
        agree = steps == want[group] if group in want else len(set(steps)) == len(steps)
        bad += not agree
        print(f"  {tag:28} {len(steps):4} values, steps {steps[0]}..{steps[-1]}, first "
              f"{events[0].value:.6g}, last {events[-1].value:.6g}, "
              f"{'each step once, as metrics.jsonl' if agree else 'NOT as metrics.jsonl'}")
    for tag in tags["images"]:
        images = ea.Images(tag)
        sizes = sorted({(i.width, i.height) for i in images})
        print(f"  {tag:28} {len(images):4} images (PNG), steps {[i.step for i in images]}, "
              f"sizes {sizes}")
        (run.parent / "last_attention.png").write_bytes(images[-1].encoded_image_string)
    for tag in tags["tensors"]:
        for t in ea.Tensors(tag):
            print(f"  {tag}: step {t.step}: {t.tensor_proto.string_val[0].decode()[:400]}")
    print(f"scalar tags not as metrics.jsonl: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
