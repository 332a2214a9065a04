"""What a reader must follow: the package code one training step and one decoding step
run, traced call by call.

    PYTHONPATH=<tree> python benchmarks/engine_trace.py [--json out.json]

A training step of the default task's model (the ``reverse`` config: N=2, d_model 64,
dropout on, ``Stepper.step`` over one micro-batch of 64 sentences) is traced with
``sys.setprofile`` (the third step of a run, so that every lazy table and memo is
built); a decoding step is one ``decode_step`` of beam search (beam 4) over a batch of
one sentence, also the third. Per trace: the package files entered, the functions (by
file and name), the deepest chain of package calls, and the share of package calls made
in the dispatcher (the op tables: ``kernels/table.py`` before the reorganisation,
``dispatch.py`` after).

Per op, as the step runs it: the files (and their lines) entered within the modules'
calls of layer norm (``LayerNorm``/``AddNorm`` methods) and of attention
(``MultiHeadAttention`` and its variants' methods), the module's own file included.
Those are the files a reader must open to follow the op from the module to the
arithmetic.

The script finds the engine in either layout, so one file measures two trees. Not a
test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

DISPATCHERS = ("kernels/table.py", "/dispatch.py")
NORM_CLASSES = ("LayerNorm", "AddNorm")
ATTENTION_CLASSES = ("MultiHeadAttention", "RelativeMultiHeadAttention", "SkewMultiHeadAttention",
                     "LocalMultiHeadAttention")


def _imp(name: str):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import layout

    return layout.engine(name)


class Tracer:
    """Package calls under ``sys.setprofile``: files, functions, depth, and the files
    entered within the calls of chosen classes' methods."""

    def __init__(self, root: Path):
        self.root = str(root)
        self.calls = Counter()  # (file, function) -> calls
        self.depth = self.max_depth = 0
        self.within = {"norm": set(), "attention": set()}
        self._open = []  # the classes' calls in flight: (kind, depth)

    def _rel(self, code) -> str | None:
        f = code.co_filename
        if not f.startswith(self.root):
            return None
        return os.path.relpath(f, os.path.dirname(self.root))

    def __call__(self, frame, event, arg):
        if event not in ("call", "return"):
            return
        rel = self._rel(frame.f_code)
        if rel is None:
            return
        if event == "call":
            self.depth += 1
            self.max_depth = max(self.max_depth, self.depth)
            self.calls[(rel, frame.f_code.co_qualname)] += 1
            cls = frame.f_code.co_qualname.split(".")[0]
            kind = ("norm" if cls in NORM_CLASSES else
                    "attention" if cls in ATTENTION_CLASSES else None)
            if kind and frame.f_code.co_name in ("forward", "backward", "exit_forward",
                                                 "exit_backward", "enter_forward",
                                                 "enter_backward"):
                self._open.append((kind, self.depth))
            for k, _ in self._open:
                self.within[k].add(rel)
        else:
            if self._open and self._open[-1][1] == self.depth:
                self._open.pop()
            self.depth -= 1

    def run(self, fn):
        sys.setprofile(self)
        try:
            return fn()
        finally:
            sys.setprofile(None)

    def summary(self) -> dict:
        files = sorted({f for f, _ in self.calls})
        total = sum(self.calls.values())
        in_dispatch = sum(n for (f, _), n in self.calls.items() if f.endswith(DISPATCHERS))
        pkg = Path(self.root).parent
        lines = lambda fs: sum(len((pkg / f).read_text().splitlines()) for f in fs)  # noqa: E731
        return {
            "files": len(files),
            "functions": len(self.calls),
            "depth": self.max_depth,
            "calls": total,
            "dispatcher_share": round(in_dispatch / total, 3) if total else 0.0,
            "file_list": files,
            "norm_files": sorted(self.within["norm"]),
            "norm_lines": lines(self.within["norm"]),
            "attention_files": sorted(self.within["attention"]),
            "attention_lines": lines(self.within["attention"]),
        }


def _reverse_model_and_batch():
    """The reverse config's model and one micro-batch of its task, as training draws it."""
    models = _imp("models")
    r = np.random.default_rng(0)
    V = 13  # 10 letters and the three specials
    # the model of configs/reverse.toml (the default run), the tiny preset's other fields
    cfg = models.TransformerConfig.preset("tiny", vocab_size=V, N=2, d_model=64, d_ff=256,
                                          h=4, P_drop=0.1, eps_ls=0.1)
    B, S = 64, 13
    src = r.integers(3, V, (B, S))
    src[:, -3:] = 0
    tgt_out = np.concatenate([src[:, ::-1][:, 3:], np.full((B, 1), 2), np.zeros((B, 2), int)], 1)
    tgt_in = np.concatenate([np.ones((B, 1), int), tgt_out[:, :-1]], 1)
    tgt_in[tgt_in == 2] = 0
    return models.Transformer(cfg), (src, tgt_in), tgt_out


def _stepper_class():
    import layout

    return _imp("step" if layout.split() else "train.stepper").Stepper


def trace_training_step() -> dict:
    """The third ``Stepper.step`` of the reverse config's model on one micro-batch."""
    from types import SimpleNamespace as NS

    device = _imp("device")
    model, inputs, targets = _reverse_model_and_batch()
    optim = NS(beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=0.0, schedule="noam", warmup=4000,
               lr_factor=1.0, lr=None, clip_norm=1.0)  # the reverse config's
    train = NS(precision="float32", loss_scale=2.0**15, loss_scale_window=2000)
    stepper = _stepper_class()(model, optim, train, model.config.d_model)
    batch = NS(inputs=inputs, targets=targets, n_targets=int(np.sum(targets != 0)),
               n_tokens=int(np.sum(inputs[0] != 0) + np.sum(targets != 0)))
    stepper.step(1, [batch], [device.generator(1)])
    stepper.step(2, [batch], [device.generator(2)])
    tracer = Tracer(Path(importlib.import_module("scratchformer").__file__).parent)
    tracer.run(lambda: stepper.step(3, [batch], [device.generator(3)]))
    return tracer.summary()


def trace_decoding_step() -> dict:
    model, (src, _), _ = _reverse_model_and_batch()
    decode = _imp("decode")
    tracer = Tracer(Path(importlib.import_module("scratchformer").__file__).parent)
    step, n = model.decode_step, [0]

    def traced(*a, **k):
        n[0] += 1
        return tracer.run(lambda: step(*a, **k)) if n[0] == 3 else step(*a, **k)

    model.decode_step = traced
    decode.beam_search(model, src[:1], beam_size=4, max_len_b=8)
    return tracer.summary()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="also write the whole result here")
    p.add_argument("--files", action="store_true", help="list the files of each trace")
    args = p.parse_args(argv)
    result = {"training step": trace_training_step(), "decoding step": trace_decoding_step()}
    for name, s in result.items():
        print(f"{name}: {s['files']} files, {s['functions']} functions, {s['depth']} calls deep, "
              f"{s['calls']} calls, {100 * s['dispatcher_share']:.0f}% of them in the dispatcher")
        if args.files:
            print("  " + "\n  ".join(s["file_list"]))
    t = result["training step"]
    for op in ("norm", "attention"):
        files, lines = t[op + "_files"], t[op + "_lines"]
        print(f"{op} in the training step: {len(files)} files, {lines} lines:")
        print("  " + "\n  ".join(files))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
