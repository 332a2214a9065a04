"""TensorBoard's event files of a run (``train.tensorboard``, ``--tensorboard``; the
tensorboard extra, tensorboardX): the scalars of metrics.jsonl and, at every validation,
the attention of a dev pair as an image, written beside metrics.jsonl in the run
directory, so that ``tensorboard --logdir runs`` shows each run under its name.

    train/loss train/nll train/ppl train/lr train/grad_norm train/tokens_per_s
    train/loss_scale train/skipped_steps         (mixed precision)
    dev/loss dev/nll dev/ppl dev/token_acc dev/seq_acc dev/accuracy dev/bleu dev/chrf
    dev/decode_seconds                           the seconds a dev BLEU took
    dev/attention                                image: the cross-attention of a short dev
                                                 pair, every layer and head (plot extra)
    test/<model>/<metric>                        at the end, for each model judged
    final model                                  text: the run's final-model line

Each process that trains writes a file of its own (rank 0 alone writes). A resumed run's
file begins with a purge mark at its first step (tensorboardX's ``purge_step``):
TensorBoard reads a run's files in the order of their names (the second each was begun
comes first in the name) and drops what the earlier files hold from that step on, so the
steps a resumed run takes again show once, as in a run never stopped.
"""

from __future__ import annotations

import math

from scratchformer.app import viz, writer
from scratchformer.app.train.rundir import event_files
from scratchformer.engine.errors import ConfigError

#: the scalars of a "train" record
TRAIN_KEYS = ("loss", "nll", "ppl", "lr", "grad_norm", "tokens_per_s", "loss_scale",
              "skipped_steps")
#: numbers of the other records that are counts or positions, not scores
NOT_SCORES = {"step", "epoch", "examples", "n_tokens", "decoded", "model_step", "tokens_seen",
              "elapsed"}


def check_installed(wanted: bool) -> None:
    """A run asked for TensorBoard's files needs tensorboardX: said at its start."""
    if not wanted:
        return
    try:
        import tensorboardX  # noqa: F401, PLC0415  (optional: the tensorboard extra)
    except ImportError:
        raise ConfigError(
            "train.tensorboard (--tensorboard) needs tensorboardX: pip install -e "
            "'.[tensorboard]' (or pip install 'tensorboardX>=2.6')"
        ) from None


class Board:
    """The event file of one process's part of a run in ``run_dir``, which resumed at
    ``step`` (0: a fresh run); ``echo`` says once why no attention image is drawn."""

    def __init__(self, run_dir, step: int, echo=print):
        self.echo = echo
        self.images = True
        self.w = writer.event_writer(
            run_dir, session=len(event_files(run_dir)) + 1,
            purge_step=step + 1 if step else None, owner=run_dir,
        )

    def scalars(self, prefix: str, record: dict, keys) -> None:
        for k in keys:
            v = record.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                self.w.add_scalar(f"{prefix}/{k}", v, record["step"])

    def record(self, r: dict) -> None:
        """The scalars of a metrics.jsonl record (train, valid and test ones)."""
        kind = r.get("kind")
        if kind == "train":
            self.scalars("train", r, TRAIN_KEYS)
        elif kind in ("valid", "test"):
            keys = [k for k in r if k not in NOT_SCORES]
            self.scalars("dev" if kind == "valid" else f"test/{r['model']}", r, keys)

    def text(self, tag: str, text: str, step: int) -> None:
        self.w.add_text(tag, text, step)

    def attention(self, step: int, task, model) -> None:
        """The cross-attention of the task's ``attention_example`` as an image, every layer
        and head (the last layer alone where all would be too large); nothing for a model
        without cross-attention, or without matplotlib (said once)."""
        pair = task.attention_example() if self.images else None
        if pair is None:
            return
        src, tgt = pair
        cfg = model.config
        itos = task.tokenizer.vocab.itos
        kw = {
            "kind": "cross",
            "src_tokens": [itos[i] for i in src],
            "tgt_in_tokens": [itos[cfg.bos_id]] + [itos[i] for i in tgt],
            "tgt_out_tokens": [itos[i] for i in tgt] + [itos[cfg.eos_id]],
            "title": f"cross-attention of a dev pair, step {step}",
        }
        try:
            maps = viz.attention_maps(model, src, [cfg.bos_id, *tgt])
            try:
                image = viz.attention_image(maps, **kw)
            except viz.PlotError as e:
                if "pixel" not in str(e):
                    raise
                image = viz.attention_image(maps, layers=[len(maps.cross) - 1], **kw)
        except viz.PlotError as e:
            self.images = False
            self.echo(f"note: TensorBoard gets no attention image: {e}")
            return
        self.w.add_image("dev/attention", image, step, dataformats="HWC")

    def flush(self) -> None:
        self.w.flush()

    def close(self) -> None:
        self.w.close()


__all__ = ["Board", "check_installed"]
