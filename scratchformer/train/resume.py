"""What a resumed run may change.

A resumed run continues exactly where it stopped only if everything that decides the
data order, the model and the optimisation is as it was: the task and its data settings,
the seed, the batches, the schedule, Adam. It may change where it writes, when it stops,
how often it logs, validates and saves, its threads and its test-time decoding
(``RESUMABLE``); ``resume_changes`` lists every other setting that differs, so that the
refusal names them all.
"""

from __future__ import annotations

#: what a resumed run may change: where it is, when it stops, how often it logs,
#: validates and saves, its threads and its test-time decoding. Anything else would
#: change the data order, the model or the optimisation, so the run would not continue.
RESUMABLE = {
    "name",
    "run_dir",
    "task.data_dir",
    "task.decode",
    "task.beam_size",
    "task.alpha",
    "task.temperature",
    "task.top_k",
    "task.sample_len",
    "train.steps",
    "train.time_limit",
    "train.log_every",
    "train.eval_every",
    "train.eval_limit",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.average_last",
    "train.test",
    "train.examples",
    "train.threads",
}


def resume_changes(cfg, stored) -> list[str]:
    """The keys (outside ``[model]``, which the model configuration decides) whose
    values differ between ``cfg`` and ``stored`` and that a resumed run may not change."""
    a, b = _flat(cfg.to_dict()), _flat(stored.to_dict())
    return sorted(
        k
        for k in set(a) | set(b)
        if not k.startswith("model.") and k not in RESUMABLE and a.get(k) != b.get(k)
    )


def _flat(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


__all__ = ["RESUMABLE", "resume_changes"]
