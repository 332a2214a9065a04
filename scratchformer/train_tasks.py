"""Training the seed variants' models: ``--task lm`` and ``--task classify``.

    scratchformer data web-text && scratchformer train --task lm --steps 3000
    scratchformer data genre    && scratchformer train --task classify --steps 1500

``lm``: a decoder-only character-level language model (``models/lm.py``) on
``<data_dir>/web.{train,dev,test}.txt`` (World English Bible verses, one per line). Each
verse is a sequence ``<bos> c_1 .. c_n`` predicting ``c_1 .. c_n <eos>``; the ``<eos>``
counts as the line's newline character, so **bits per character** = mean NLL per
predicted token / ln 2 over the dev (or test) set, as for enwik8 / text8 with newlines.

``classify``: an encoder-only classifier (``models/classifier.py``) on
``<data_dir>/genre.{train,dev,test}.tsv`` (``label<TAB>verse``). Verses are lower-cased,
split into words and punctuation, and prefixed with ``<bos>`` (the token classified).
Reports accuracy against the majority-class baseline (the most frequent training label).

Same recipe as the main loop (scratchformer/train.py): token-budget batches
(``TokenBatchSampler``), Adam (0.9, 0.98, 1e-9), the warmup schedule, global-norm clipping,
dropout seeded by ``(seed, step)``. Outputs in ``runs/<name>``: ``config.json``,
``metrics.jsonl`` and ``checkpoints/checkpoint_<step>.npz`` (meta: task, tokenizer,
labels; with the optimizer moments and the position in the data), loadable with
``load_task_checkpoint``. ``--resume`` continues from the newest checkpoint exactly as if
the run had not stopped (same batches, same dropout masks, same Adam moments).
"""

from __future__ import annotations

import json
import math
import re
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

from threadpoolctl import threadpool_limits

from scratchformer import backend
from scratchformer.checkpoint import (
    CheckpointError,
    checkpoint_name,
    list_checkpoints,
    read_params,
    read_state,
    save_checkpoint,
)
from scratchformer.data.batching import TokenBatchSampler, fixed_batches
from scratchformer.data.tokenizers import CharTokenizer, WhitespaceTokenizer, tokenizer_from_dict
from scratchformer.data.vocab import Vocab
from scratchformer.errors import ScratchformerError
from scratchformer.models import PRESETS, EncoderClassifier, LanguageModel, TransformerConfig
from scratchformer.models.config import wrong_field_types
from scratchformer.ops.loss import cross_entropy_forward
from scratchformer.optim import Adam, clip_grad_norm, make_schedule
from scratchformer.train import truncate_metrics

TASKS = ("lm", "classify")

_DEFAULT_MODELS = {
    # ~0.6 M parameters: a few thousand characters per second on one CPU core
    "lm": dict(
        N=3,
        d_model=128,
        d_ff=512,
        h=4,
        P_drop=0.1,
        eps_ls=0.0,
        norm="pre",
        attention="relative_skew",
        max_relative_position=64,
        max_len=384,
    ),  # fmt: skip
    "classify": dict(
        N=2,
        d_model=128,
        d_ff=512,
        h=4,
        P_drop=0.1,
        eps_ls=0.0,
        norm="pre",
        attention="relative",
        max_relative_position=16,
        max_len=160,
    ),  # fmt: skip
}


class TaskTrainError(ScratchformerError):
    """The lm/classify training settings or data are unusable."""


@dataclass
class TaskTrainConfig:
    task: str = "lm"  # "lm" or "classify"
    name: str = ""  # run name (default: the task); outputs in runs/<name>
    run_dir: str = ""  # "" = runs/<name>
    data_dir: str = "data"  # where `scratchformer data` wrote the files
    seed: int = 0
    model: dict = field(default_factory=dict)  # TransformerConfig keys (+ "preset")
    steps: int = 2000  # optimizer steps
    max_tokens: int = 4096  # token budget of a batch (sequences x padded length)
    schedule: str = "noam"  # "noam" or "constant"
    warmup: int = 400
    lr_factor: float = 1.0  # noam: factor * d^-0.5 * min(s^-0.5, s w^-1.5)
    lr: float = 1e-3  # constant: the peak learning rate
    clip_norm: float = 1.0
    log_every: int = 50
    eval_every: int = 500  # 0 = only at the end
    eval_limit: int = 0  # evaluate on the first N dev sequences during training (0 = all)
    time_limit: float = 0.0  # seconds; stop (and evaluate) when exceeded; 0 = none
    min_freq: int = 2  # classify: words seen fewer times are <unk>
    max_vocab: int = 8000  # classify: the most frequent words kept
    threads: int = 1  # BLAS threads

    @property
    def out_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path("runs") / (self.name or self.task)

    def validate(self) -> None:
        def need(cond, msg):
            if not cond:
                raise TaskTrainError(f"invalid {self.task} training settings: {msg}")

        wrong = wrong_field_types(type(self), vars(self))
        need(not wrong, "; ".join(wrong))
        need(self.task in TASKS, f"task={self.task!r}: expected one of {TASKS}")
        need(self.steps >= 1, "steps must be >= 1")
        need(self.max_tokens >= 16, "max_tokens must be >= 16")
        need(self.schedule in ("noam", "constant"), f"schedule={self.schedule!r}")


_FIELDS = tuple(TaskTrainConfig.__dataclass_fields__)


def words(text: str) -> str:
    """The classifier's pre-tokenisation: lower case, words and punctuation apart."""
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


# -- data ------------------------------------------------------------------------------------------
def _need_file(path: Path, command: str) -> Path:
    if not path.exists():
        raise TaskTrainError(f"{path} not found: prepare it first with `scratchformer {command}`")
    return path


def load_lm_data(data_dir) -> dict:
    """``{split: [verse text]}`` from ``web.{train,dev,test}.txt``."""
    d = Path(data_dir)
    out = {}
    for s in ("train", "dev", "test"):
        p = _need_file(d / f"web.{s}.txt", f"data web-text --data-dir {d}")
        out[s] = [line.rstrip("\n") for line in open(p, encoding="utf-8") if line.strip()]
    return out


def load_genre_data(data_dir) -> dict:
    """``{split: [(label, text)]}`` from ``genre.{train,dev,test}.tsv``."""
    d = Path(data_dir)
    out = {}
    for s in ("train", "dev", "test"):
        p = _need_file(d / f"genre.{s}.tsv", f"data genre --data-dir {d}")
        rows = []
        for line in open(p, encoding="utf-8"):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[1]:
                rows.append((parts[0], parts[1]))
        out[s] = rows
    return out


def _encode_lm(tok, texts, max_len):
    """[(ids, targets)] with ids = <bos> + chars, targets = chars + <eos>, both cut at
    max_len (a cut verse loses its <eos>)."""
    np = backend.np
    v = tok.vocab
    out = []
    for t in texts:
        ids = tok.encode(t)
        x = np.asarray([v.bos_id, *ids], dtype=np.int64)[:max_len]
        y = np.asarray([*ids, v.eos_id], dtype=np.int64)[:max_len]
        out.append((x, y))
    return out


def _pad(rows, pad_id):
    np = backend.np
    T = max(len(r) for r in rows)
    a = np.full((len(rows), T), pad_id, dtype=np.int64)
    for i, r in enumerate(rows):
        a[i, : len(r)] = r
    return a


# -- the task objects: data, model, batches, metrics -----------------------------------------------
class _LMTask:
    def __init__(self, cfg: TaskTrainConfig, model_cfg: dict):
        data = load_lm_data(cfg.data_dir)
        self.tokenizer = CharTokenizer.fit(data["train"])
        self.model_config = _model_config(cfg, model_cfg, len(self.tokenizer.vocab))
        L = self.model_config.max_len
        self.splits = {s: _encode_lm(self.tokenizer, t, L) for s, t in data.items()}
        self.texts = data
        self.model = LanguageModel(self.model_config)
        self.labels = None

    def widths(self, split):
        return [len(x) for x, _ in self.splits[split]]

    def batch(self, split, idx):
        rows = [self.splits[split][i] for i in idx]
        pad = self.model_config.pad_id
        return backend.asarray(_pad([x for x, _ in rows], pad)), backend.asarray(
            _pad([y for _, y in rows], pad)
        )

    def n_targets(self, cache) -> int:
        return cache.loss.n_tokens

    def evaluate(self, split, max_tokens, limit=0) -> dict:
        n = len(self.splits[split]) if not limit else min(limit, len(self.splits[split]))
        widths = self.widths(split)[:n]
        nll = 0.0
        tok = 0
        for idx in fixed_batches(widths, max(max_tokens, max(widths))):
            x, y = self.batch(split, idx)
            logits, _ = self.model.forward(x)
            _, lc = cross_entropy_forward(logits, y, 0.0, self.model_config.pad_id)
            nll += lc.nll_sum
            tok += lc.n_tokens
        nats = nll / max(tok, 1)
        return {"nll": nats, "bpc": nats / math.log(2), "chars": tok, "sequences": n}

    def meta(self) -> dict:
        return {"task": "lm", "tokenizer": self.tokenizer.to_dict()}


class _ClassifyTask:
    def __init__(self, cfg: TaskTrainConfig, model_cfg: dict):
        data = load_genre_data(cfg.data_dir)
        train_text = [words(t) for _, t in data["train"]]
        self.tokenizer = WhitespaceTokenizer.fit(
            train_text, min_freq=cfg.min_freq, max_size=cfg.max_vocab
        )
        self.labels = sorted({lab for lab, _ in data["train"]})
        self.model_config = _model_config(cfg, model_cfg, len(self.tokenizer.vocab))
        L = self.model_config.max_len
        np = backend.np
        lab_id = {lab: i for i, lab in enumerate(self.labels)}
        self.splits = {}
        for s, rows in data.items():
            enc = []
            for lab, t in rows:
                if lab not in lab_id:
                    raise TaskTrainError(f"label {lab!r} of {s} never occurs in train")
                ids = [Vocab.bos_id, *self.tokenizer.encode(words(t))][:L]
                enc.append((np.asarray(ids, dtype=np.int64), lab_id[lab]))
            self.splits[s] = enc
        self.model = EncoderClassifier(self.model_config, len(self.labels))
        counts = np.bincount([y for _, y in self.splits["train"]], minlength=len(self.labels))
        self.majority = int(counts.argmax())

    def widths(self, split):
        return [len(x) for x, _ in self.splits[split]]

    def batch(self, split, idx):
        np = backend.np
        rows = [self.splits[split][i] for i in idx]
        x = _pad([r for r, _ in rows], self.model_config.pad_id)
        return backend.asarray(x), backend.asarray(np.asarray([y for _, y in rows]))

    def n_targets(self, cache) -> int:
        return int(cache.loss.n_tokens)

    def evaluate(self, split, max_tokens, limit=0) -> dict:
        np = backend.np
        n = len(self.splits[split]) if not limit else min(limit, len(self.splits[split]))
        widths = self.widths(split)[:n]
        right = 0
        nll = 0.0
        gold_all, pred_all = [], []
        for idx in fixed_batches(widths, max(max_tokens, max(widths))):
            x, y = self.batch(split, idx)
            logits, _ = self.model.forward(x)
            _, lc = cross_entropy_forward(logits, y, 0.0, None)
            nll += lc.nll_sum
            pred = backend.asnumpy(logits.argmax(axis=-1))
            gold = backend.asnumpy(y)
            right += int((pred == gold).sum())
            gold_all += gold.tolist()
            pred_all += pred.tolist()
        gold_all, pred_all = np.asarray(gold_all), np.asarray(pred_all)
        per_class = {
            lab: float((pred_all[gold_all == i] == i).mean()) if (gold_all == i).any() else None
            for i, lab in enumerate(self.labels)
        }
        return {
            "accuracy": right / n,
            "nll": nll / n,
            "majority_baseline": float((gold_all == self.majority).mean()),
            "majority_class": self.labels[self.majority],
            "per_class_recall": per_class,
            "sequences": n,
        }

    def meta(self) -> dict:
        return {"task": "classify", "tokenizer": self.tokenizer.to_dict(), "labels": self.labels}


def _model_config(cfg: TaskTrainConfig, model_cfg: dict, vocab_size: int) -> TransformerConfig:
    m = {**_DEFAULT_MODELS[cfg.task], **model_cfg}
    preset = m.pop("preset", None)
    if preset is not None and preset not in PRESETS:
        raise TaskTrainError(f"unknown model preset {preset!r}")
    kw = {**(PRESETS[preset] if preset else {}), **m}
    kw.setdefault("seed", cfg.seed)
    kw.update(vocab_size=vocab_size, pad_id=Vocab.pad_id, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id)
    try:
        return TransformerConfig(**kw)
    except (TypeError, ValueError) as e:
        raise TaskTrainError(f"invalid model settings: {e}") from None


# -- resuming ------------------------------------------------------------------------------
#: Settings a resumed run may change: when to stop, log and validate, the threads, and
#: where the run and its data are (a moved directory; the vocabulary is checked anyway).
RESUMABLE_CHANGES = (
    "steps",
    "time_limit",
    "log_every",
    "eval_every",
    "eval_limit",
    "threads",
    "name",
    "run_dir",
    "data_dir",
)


def _check_resumable(cfg: TaskTrainConfig, stored, path) -> None:
    """Refuse to resume ``path`` (its stored training config ``stored``) with another task,
    or with settings that change the data order or the model."""
    if not isinstance(stored, dict) or stored.get("task") != cfg.task:
        raise TaskTrainError(f"{path} is not a checkpoint of a --task {cfg.task} run")
    changed = sorted(
        k for k in _FIELDS if k not in RESUMABLE_CHANGES and getattr(cfg, k) != stored.get(k)
    )
    if changed:
        raise TaskTrainError(
            f"cannot resume from {path} with other {', '.join(changed)} "
            f"(only {', '.join(RESUMABLE_CHANGES)} may change)"
        )


def resume_config(flags: dict, model: dict, resume: str) -> tuple[TaskTrainConfig, Path]:
    """The configuration of a resumed lm/classify run and the checkpoint to resume from.

    ``flags``: the ``TaskTrainConfig`` fields given on the command line (``task`` and the
    run's ``name``/``run_dir`` locate it); ``resume``: "latest" or a checkpoint path. The
    stored configuration is used, with ``flags``/``model`` on top; changing anything but
    ``RESUMABLE_CHANGES`` is refused, since the data order or the model would differ.
    """
    probe = TaskTrainConfig(**flags)
    if resume == "latest":
        ckpt_dir = probe.out_dir / "checkpoints"
        found = list_checkpoints(ckpt_dir) if ckpt_dir.is_dir() else []
        if not found:
            raise TaskTrainError(f"nothing to resume: no checkpoints in {ckpt_dir}")
        path = found[-1][1]
    else:
        path = Path(resume)
    _, header = read_params(path)
    stored = (header.get("meta") or {}).get("train_config")
    if not isinstance(stored, dict):
        raise TaskTrainError(f"{path} is not a checkpoint of a --task {probe.task} run")
    merged = {**stored, **flags, "model": {**stored.get("model", {}), **model}}
    if resume == "latest" or "name" in flags or "run_dir" in flags:
        merged["name"], merged["run_dir"] = probe.name, probe.run_dir  # where it was found
    cfg = TaskTrainConfig(**{k: v for k, v in merged.items() if k in _FIELDS})
    _check_resumable(cfg, stored, path)
    return cfg, path


def _restore(path: Path, cfg: TaskTrainConfig, model, opt, tokenizer) -> dict:
    """Load parameters and Adam moments from ``path``; returns its training state."""
    params, opt_state, header = read_state(path)
    meta, state = header.get("meta") or {}, header.get("train_state")
    _check_resumable(cfg, meta.get("train_config"), path)
    if opt_state is None or not isinstance(state, dict):
        raise TaskTrainError(
            f"cannot resume from {path}: it holds no optimizer/training state (written by an "
            "older scratchformer?)"
        )
    if meta.get("tokenizer") != tokenizer.to_dict():
        raise TaskTrainError(
            f"cannot resume from {path}: its vocabulary differs from the one built from the "
            "data now (was the data prepared again?)"
        )
    try:
        model.load_state_dict(params)
        opt.load_state_dict(opt_state)
    except ScratchformerError as e:
        raise TaskTrainError(f"cannot resume from {path}: {e}") from None
    return state


# -- the loop ------------------------------------------------------------------------------
def _dropout_rng(seed: int, step: int):
    ss = backend.np.random.SeedSequence([seed, step])
    return backend.rng(int(ss.generate_state(1, dtype=backend.np.uint64)[0] >> 1))


def train_task(
    cfg: TaskTrainConfig, progress=True, echo=print, overwrite=False, resume=None
) -> dict:
    """Train an LM or a classifier; returns the final record (test metrics included).

    A checkpoint (parameters, Adam moments, position in the data) is written at every
    validation and at the end, so an interrupted run keeps its work. A run directory
    that already holds checkpoints is refused unless ``overwrite`` (its checkpoints are
    then deleted first) or ``resume`` (a checkpoint path, see ``resume_config``): the run
    then continues from it, and checkpoints and metrics past it are dropped.
    """
    cfg.validate()
    out = cfg.out_dir
    existing = list_checkpoints(out / "checkpoints") if (out / "checkpoints").is_dir() else []
    if existing and not overwrite and resume is None:
        raise TaskTrainError(
            f"{out} already holds checkpoints (up to step {existing[-1][0]}): pass --resume "
            "to continue, --overwrite to start again there, or --name/--run-dir for a new run"
        )
    task = (_LMTask if cfg.task == "lm" else _ClassifyTask)(cfg, dict(cfg.model))
    model, mc = task.model, task.model_config
    sampler = TokenBatchSampler(task.widths("train"), cfg.max_tokens, seed=cfg.seed)
    opt = Adam(model.parameters(), 0.9, 0.98, 1e-9)
    state = {"step": 0, "epoch": 0, "batch_index": 0, "tokens": 0, "seconds": 0.0}
    if resume is not None:
        state = _restore(Path(resume), cfg, model, opt, task.tokenizer)
    later = [p for s, p in existing if resume is None or s > state["step"]]
    if later and resume is not None and not overwrite:
        raise TaskTrainError(
            f"{out} holds checkpoints past step {state['step']} ({later[-1].name}): resume "
            "from the newest, or pass --overwrite to drop them"
        )
    for p in later:
        p.unlink()
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    if resume is not None:
        truncate_metrics(metrics, state["step"])  # the records up to the resumed step
    else:
        metrics.write_text("")
    (out / "config.json").write_text(
        json.dumps({**asdict(cfg), "model_resolved": mc.to_dict()}, indent=2)
    )

    def log(rec):
        with open(metrics, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def save(step):  # atomic (save_checkpoint writes a temporary file, then renames)
        meta = {**task.meta(), "train_config": asdict(cfg)}
        train_state = {
            "step": step,
            "epoch": epoch,
            "batch_index": bi,
            "tokens": total_tokens,
            "seconds": state["seconds"] + time.perf_counter() - t_start,
        }
        return save_checkpoint(
            out / "checkpoints" / checkpoint_name(step),
            model,
            step=step,
            optimizer=opt,
            meta=meta,
            train_state=train_state,
        )

    schedule = make_schedule(
        cfg.schedule, d_model=mc.d_model, warmup=cfg.warmup, factor=cfg.lr_factor, lr=cfg.lr
    )
    n_train = len(task.splits["train"])
    how = f"resuming at step {state['step']}" if resume is not None else "training"
    echo(
        f"{how} {cfg.task} ({mc.attention} attention, N={mc.N}, d_model={mc.d_model}, "
        f"h={mc.h}): {model.num_parameters():,} parameters, vocabulary {mc.vocab_size}, "
        f"{n_train} training sequences, {len(sampler)} batches/epoch -> {out}"
    )
    limits = threadpool_limits(cfg.threads) if cfg.threads else None
    epoch, bi, step = state["epoch"], state["batch_index"], state["step"]
    t_start = time.perf_counter()
    win = {"loss": 0.0, "n": 0, "tokens": 0, "t": time.perf_counter()}
    total_tokens = state["tokens"]
    bar = None
    if progress:
        from tqdm.auto import tqdm  # noqa: PLC0415

        bar = tqdm(total=cfg.steps, initial=step, desc=cfg.task, unit="step")
    try:
        while step < cfg.steps:
            batches = sampler.epoch(epoch)
            if bi >= len(batches):
                epoch, bi = epoch + 1, 0
                continue
            x, y = task.batch("train", batches[bi])
            bi += 1
            step += 1
            model.zero_grad()
            loss, cache = model.loss_forward(x, y, rng=_dropout_rng(cfg.seed, step))
            model.loss_backward(cache)
            norm = clip_grad_norm(model.gradients(), cfg.clip_norm)
            if not (math.isfinite(float(loss)) and math.isfinite(norm)):
                raise TaskTrainError(f"training diverged at step {step} (loss {float(loss)})")
            lr = schedule(step)
            opt.step(model.gradients(), lr)
            n_tok = int((backend.asnumpy(x) != mc.pad_id).sum())
            total_tokens += n_tok
            win["loss"] += float(loss)
            win["n"] += 1
            win["tokens"] += n_tok
            if bar is not None:
                bar.update(1)
            if step % cfg.log_every == 0 or step == cfg.steps:
                dt = time.perf_counter() - win["t"]
                rec = {
                    "kind": "train",
                    "step": step,
                    "epoch": epoch,
                    "loss": win["loss"] / win["n"],
                    "lr": lr,
                    "grad_norm": norm,
                    "tokens_per_s": win["tokens"] / max(dt, 1e-9),
                    "elapsed": state["seconds"] + time.perf_counter() - t_start,
                }
                log(rec)
                if bar is not None:
                    bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}")
                win = {"loss": 0.0, "n": 0, "tokens": 0, "t": time.perf_counter()}
            over_time = cfg.time_limit and time.perf_counter() - t_start > cfg.time_limit
            if (cfg.eval_every and step % cfg.eval_every == 0) and step < cfg.steps:
                ev = task.evaluate("dev", cfg.max_tokens, cfg.eval_limit)
                log({"kind": "valid", "step": step, **ev})
                echo(f"step {step}: dev {_summary(cfg.task, ev)}")
                save(step)
            if over_time:
                echo(f"time limit of {cfg.time_limit:.0f} s reached at step {step}")
                break
    finally:
        if bar is not None:
            bar.close()
        if limits is not None:
            limits.unregister()
    ckpt = save(step)
    train_time = state["seconds"] + time.perf_counter() - t_start
    with threadpool_limits(cfg.threads) if cfg.threads else nullcontext():
        dev = task.evaluate("dev", cfg.max_tokens)
        test = task.evaluate("test", cfg.max_tokens)
    final = {
        "kind": "test",
        "step": step,
        "train_seconds": train_time,
        "train_tokens": total_tokens,
        "tokens_per_s": total_tokens / max(train_time, 1e-9),
        "parameters": model.num_parameters(),
        "dev": dev,
        "test": test,
        "checkpoint": str(ckpt),
    }
    log(final)
    echo(f"\nafter {step} steps ({train_time:.0f} s, {final['tokens_per_s']:.0f} tokens/s):")
    echo(f"  dev  {_summary(cfg.task, dev)}")
    echo(f"  test {_summary(cfg.task, test)}")
    if cfg.task == "lm":
        from scratchformer.decode.sample import generate  # noqa: PLC0415

        ids = generate(model, [mc.bos_id], 300, temperature=0.8, top_k=0, seed=cfg.seed)[0]
        final["sample"] = task.tokenizer.decode(ids)
        echo(f"  sample (temperature 0.8): {final['sample']}")
    echo(f"checkpoint: {ckpt}")
    return final


def _summary(task: str, ev: dict) -> str:
    if task == "lm":
        return f"bits/char {ev['bpc']:.4f} (nll {ev['nll']:.4f} nats, {ev['chars']} chars)"
    return (
        f"accuracy {100 * ev['accuracy']:.2f}% (majority baseline "
        f"{100 * ev['majority_baseline']:.2f}%, '{ev['majority_class']}'; {ev['sequences']} verses)"
    )


# -- checkpoints -----------------------------------------------------------------------------
def load_task_checkpoint(path):
    """``(model, tokenizer, meta)`` of an lm/classify checkpoint."""
    params, header = read_params(path)
    meta = header.get("meta") or {}
    task = meta.get("task")
    if task not in TASKS:
        raise CheckpointError(
            f"{path} is not a language-model or classifier checkpoint (meta task {task!r})"
        )
    config = TransformerConfig.from_dict(header["config"])
    if task == "lm":
        model = LanguageModel(config)
    else:
        model = EncoderClassifier(config, len(meta["labels"]))
    model.load_state_dict(params)
    return model, tokenizer_from_dict(meta["tokenizer"]), meta


__all__ = [
    "TASKS",
    "TaskTrainConfig",
    "RESUMABLE_CHANGES",
    "TaskTrainError",
    "load_genre_data",
    "load_lm_data",
    "load_task_checkpoint",
    "resume_config",
    "train_task",
    "words",
]
