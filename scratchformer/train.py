"""The training loop: the paper's recipe on a built-in task, importable and resumable.

    from scratchformer.train import TrainConfig, train
    result = train(TrainConfig())              # the default: reverse strings of 1-12 letters
    result.test["seq_acc_decoded"]             # held-out exact-sequence accuracy

One optimizer step ``s`` (counted from 1):

    1. draw ``accum_steps`` token-budget batches (the data order is a function of
       ``(seed, epoch)``; the position in it is part of the saved state)
    2. for each micro-batch i: forward with dropout (generator seeded by
       ``(seed, s, i)``), backward of ``n_i * loss_i`` (n_i = its non-pad target tokens)
    3. divide every gradient by ``sum_i n_i``: the gradient of the mean loss over the
       union of the micro-batches, exactly as if they were one batch
    4. stop with an error naming the step if the loss or the gradient norm is not finite
    5. clip the global gradient norm, ``lr = schedule(s)``, one Adam step

Because every source of randomness is a function of ``(seed, step)`` or
``(seed, epoch)``, a checkpoint holding the parameters, Adam's moments, the step and
the data position resumes bit for bit: ``N`` steps + resume + ``N`` steps gives the
same losses as ``2N`` steps in one run.

Outputs in the run directory (``runs/<name>`` by default):

    config.json                 the resolved training configuration
    metrics.jsonl               one JSON object per line: "train", "valid", "test" records
    checkpoints/checkpoint_<step>.npz    every ``checkpoint_every`` steps and at the end
                                (the newest ``keep_checkpoints`` are kept)
    checkpoints/averaged.npz    the mean of the last ``average_last`` checkpoints

Validation reports the label-smoothed loss, perplexity ``exp(NLL per token)``, token
accuracy and exact-sequence accuracy, all teacher-forced. Teacher-forced exact-sequence
accuracy equals the accuracy of greedy decoding: if every argmax is right given the true
prefix, greedy decoding follows the true prefix, and conversely. The end of training
decodes the test set for real (beam search when available, else greedy), with the last
checkpoint and with the average of the last ``average_last`` checkpoints, as the paper
does (its base model averages the last 5). On the default task averaging smooths out the
last steps' oscillation: seeds whose last checkpoint scored 98.2-99.4% reach 99.8-100%.
"""

from __future__ import annotations

import importlib
import json
import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from scratchformer import backend
from scratchformer.checkpoint import (
    CheckpointError,
    average_checkpoints,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from scratchformer.data import (
    TaskConfig,
    TokenBatchSampler,
    Vocab,
    collate,
    example_widths,
    fixed_batches,
    make_task,
)
from scratchformer.errors import ScratchformerError
from scratchformer.models import PRESETS, Transformer, TransformerConfig
from scratchformer.models.config import wrong_field_types
from scratchformer.ops.loss import cross_entropy_forward
from scratchformer.optim import Adam, clip_grad_norm, make_schedule


class ConfigError(ScratchformerError):
    """A training configuration is invalid (unknown key, bad value, inconsistent)."""


class TrainingDiverged(ScratchformerError):
    """The loss or the gradient became NaN or infinite; training stopped."""


# -- configuration ---------------------------------------------------------------------------
def _from_dict(cls, d: dict, section: str):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {unknown} in [{section}]: expected some of {sorted(known)}"
        )
    _check_types(cls, d, section)
    return cls(**d)


def _check_types(cls, d: dict, section: str) -> None:
    """``--set train.max_steps=abc`` is a sentence naming the key, not a TypeError deep in
    the loop (the annotations of ``cls`` say what each key holds)."""
    wrong = wrong_field_types(cls, d)
    if wrong:
        raise ConfigError(f"[{section}] " + f"; [{section}] ".join(wrong))


@dataclass
class OptimConfig:
    """[optim]: Adam and the learning-rate schedule."""

    schedule: str = "noam"  # "noam" (the paper) or "constant" (linear warmup to lr)
    factor: float = 1.0  # noam: lr = factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)
    lr: float = 1e-3  # constant: the peak learning rate
    warmup: int = 400  # warmup steps (the paper: 4000)
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-9
    weight_decay: float = 0.0  # decoupled (AdamW); the paper: 0
    clip_norm: float = 1.0  # global gradient-norm clipping; 0 turns it off


@dataclass
class LoopConfig:
    """[train]: batching, length of training, evaluation and checkpoints."""

    max_steps: int = 3000  # optimizer steps
    max_tokens: int = 1024  # token budget of one micro-batch (sentences x padded width)
    max_sentences: int = 0  # optional cap on sentences per micro-batch; 0 = none
    accum_steps: int = 1  # micro-batches per optimizer step
    log_every: int = 50  # steps between "train" records in metrics.jsonl
    eval_every: int = 500  # steps between validations; 0 = only at the end
    checkpoint_every: int = 250  # steps between checkpoints; 0 = only at the end
    keep_checkpoints: int = 5  # keep only the newest k checkpoints; 0 keeps all
    decode: str = "auto"  # final test decoding: "auto" (beam if available), "beam", "greedy"
    beam_size: int = 4
    alpha: float = 0.6  # beam search length penalty
    examples: int = 5  # source/output examples printed at the end
    average_last: int = 5  # final model = mean of the last k checkpoints (the paper); 0 = off
    # BLAS threads while training; 0 = the BLAS default. Small models run fastest on one:
    # on matrices this small, BLAS threads mostly spin-wait, and far worse when another
    # process keeps a core busy (10x slower steps measured on 2 cores).
    threads: int = 1


@dataclass
class TrainConfig:
    """The whole run. The defaults ARE the embedded default run (configs/reverse.toml)."""

    name: str = "reverse"  # the run's name; outputs go to runs/<name>
    seed: int = 0  # model initialisation, data order and dropout
    run_dir: str = ""  # "" = runs/<name>
    task: TaskConfig = field(default_factory=TaskConfig)
    # TransformerConfig fields, plus "preset" (applied first); vocab_size and the special ids
    # come from the tokenizer. A [model] section in a config file replaces this whole dict.
    model: dict = field(
        default_factory=lambda: {
            "preset": "tiny",
            "N": 2,
            "d_model": 64,
            "d_ff": 256,
            "h": 4,
            "P_drop": 0.1,
            "eps_ls": 0.1,
        }
    )
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: LoopConfig = field(default_factory=LoopConfig)

    @property
    def out_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path("runs") / self.name

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        top = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - top)
        if unknown:
            raise ConfigError(f"unknown top-level key(s) {unknown}: expected some of {sorted(top)}")
        default = cls()
        kwargs = {k: d[k] for k in ("name", "seed", "run_dir") if k in d}
        _check_types(cls, kwargs, "top level")
        try:
            task = TaskConfig.from_dict({**default.task.to_dict(), **d.get("task", {})})
        except ScratchformerError as e:
            raise ConfigError(str(e)) from None
        # A [model] section replaces the default model as a whole: merging key by key would
        # let the default's d_model etc. silently override the section's preset.
        model = dict(d["model"]) if "model" in d else default.model
        optim = _from_dict(OptimConfig, {**asdict(default.optim), **d.get("optim", {})}, "optim")
        loop = _from_dict(LoopConfig, {**asdict(default.train), **d.get("train", {})}, "train")
        cfg = cls(**kwargs, task=task, model=model, optim=optim, train=loop)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        def need(cond, msg):
            if not cond:
                raise ConfigError(f"invalid training config: {msg}")

        t = self.train
        need(t.max_steps >= 1, f"train.max_steps must be >= 1, got {t.max_steps}")
        need(t.max_tokens >= 1, f"train.max_tokens must be >= 1, got {t.max_tokens}")
        need(t.accum_steps >= 1, f"train.accum_steps must be >= 1, got {t.accum_steps}")
        for k in (
            "log_every",
            "eval_every",
            "checkpoint_every",
            "keep_checkpoints",
            "max_sentences",
            "average_last",
            "threads",
        ):
            need(getattr(t, k) >= 0, f"train.{k} must be >= 0")
        need(t.decode in ("auto", "beam", "greedy"), f"train.decode={t.decode!r}")
        need(self.optim.schedule in ("noam", "constant"), f"optim.schedule={self.optim.schedule!r}")
        need(self.optim.warmup >= 0, "optim.warmup must be >= 0")
        need(self.optim.clip_norm >= 0, "optim.clip_norm must be >= 0")
        need(isinstance(self.model, dict), "[model] must be a table")
        for k in ("vocab_size", "pad_id", "bos_id", "eos_id"):
            need(k not in self.model, f"model.{k} is set by the tokenizer and cannot be configured")
        try:
            self.task.validate()
        except ScratchformerError as e:
            raise ConfigError(str(e)) from None


def build_model_config(cfg: TrainConfig, vocab_size: int) -> TransformerConfig:
    """The TransformerConfig of a run: ``model.preset`` (if any), then the other
    ``[model]`` keys, then the vocabulary's size and special ids."""
    m = dict(cfg.model)
    preset = m.pop("preset", None)
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}: expected one of {sorted(PRESETS)}")
    kwargs = {**(PRESETS[preset] if preset else {}), **m}
    kwargs.setdefault("seed", cfg.seed)
    kwargs.update(
        vocab_size=vocab_size, pad_id=Vocab.pad_id, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id
    )
    try:
        mc = TransformerConfig(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"invalid [model] settings: {e}") from None
    need = cfg.task.max_len + 1  # the longest source, or target + bos/eos
    if mc.max_len < need:
        raise ConfigError(
            f"model.max_len={mc.max_len} is shorter than the task needs ({need} = task.max_len + 1)"
        )
    return mc


# -- evaluation ------------------------------------------------------------------------------
def evaluate(model: Transformer, pairs, max_tokens: int) -> dict:
    """Teacher-forced metrics of ``model`` on ``[(src ids, tgt ids)]``, dropout off.

    loss: label-smoothed cross-entropy per target token (what training minimises);
    nll / ppl: plain cross-entropy per token and ``exp`` of it; token_acc: share of
    target tokens (eos included) whose argmax is right; seq_acc: share of sequences
    with every token right (= greedy decoding's exact-match accuracy).
    """
    np = backend.np
    widths = example_widths(pairs)
    loss_sum = nll_sum = 0.0
    n_tok = n_right = n_seq_right = 0
    for idx in fixed_batches(widths, max(max_tokens, int(widths.max()))):
        batch = collate([pairs[i] for i in idx], indices=idx)
        src, tgt_in, tgt_out = (backend.asarray(a) for a in batch[:3])
        logits, _ = model.forward(src, tgt_in)
        loss, lc = cross_entropy_forward(logits, tgt_out, model.config.eps_ls, model.config.pad_id)
        loss_sum += float(loss) * lc.n_tokens
        nll_sum += lc.nll_sum
        n_tok += lc.n_tokens
        pred = backend.asnumpy(logits.argmax(axis=-1))
        keep = batch.tgt_out != model.config.pad_id
        right = (pred == batch.tgt_out) & keep
        n_right += int(right.sum())
        n_seq_right += int((right == keep).all(axis=1).sum())
    nll = nll_sum / max(n_tok, 1)
    return {
        "loss": loss_sum / max(n_tok, 1),
        "nll": nll,
        "ppl": float(np.exp(min(nll, 700.0))),
        "token_acc": n_right / max(n_tok, 1),
        "seq_acc": n_seq_right / len(pairs),
        "n_sentences": len(pairs),
        "n_tokens": n_tok,
    }


def _decode_module():
    try:
        return importlib.import_module("scratchformer.decode")
    except ImportError:
        return None


def decode_outputs(
    model: Transformer,
    pairs,
    method: str = "auto",
    beam_size=4,
    alpha=0.6,
    batch_size: int = 64,
    min_len: int = 0,
):
    """Decode the sources of ``pairs``; returns ``(method used, [output ids])``.

    ``method``: "beam" (``scratchformer.decode.beam_search``), "greedy"
    (``greedy_decode``) or "auto" (beam if available, else greedy); ``min_len``: fewest
    output tokens (translation uses 1: see ``scratchformer.decode.translate``). Returns
    ``(None, None)`` when no decoder is installed.
    """
    dec = _decode_module()
    if method == "auto":
        method = "beam" if dec is not None and hasattr(dec, "beam_search") else "greedy"
    fn = getattr(dec, "beam_search" if method == "beam" else "greedy_decode", None) if dec else None
    if fn is None:
        return None, None
    outputs = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        src = backend.asarray(collate(chunk).src)
        if method == "beam":
            hyps = fn(model, src, beam_size=beam_size, alpha=alpha, min_len=min_len)
            outputs += [list(h[0].tokens) for h in hyps]
        else:
            outputs += [list(y) for y in fn(model, src, min_len=min_len)]
    return method, outputs


# -- gradients over micro-batches ------------------------------------------------------------
def accumulate_gradients(model: Transformer, batches, rngs=None) -> tuple[float, float, int]:
    """Zero the gradients, then leave in them the gradient of the mean loss over the union
    of ``batches`` (their non-pad target tokens together), as one batch would.

    Micro-batch i has mean loss ``L_i`` over ``n_i`` tokens. Back-propagating ``n_i * L_i``
    adds ``n_i * dL_i``; dividing the sum by ``n = sum_i n_i`` gives
    ``d(sum_i n_i L_i / n)``, the gradient of the union's mean loss. (Averaging the
    micro-batch means instead would over-weight the short micro-batches.)

    ``rngs``: one dropout generator per micro-batch, or None (dropout off).
    Returns ``(mean loss, mean NLL per token, n)``.
    """
    model.zero_grad()
    loss_sum = nll_sum = 0.0
    n_total = 0
    for i, batch in enumerate(batches):
        rng = rngs[i] if rngs is not None else None
        src, tgt_in, tgt_out = (backend.asarray(a) for a in batch[:3])
        loss, cache = model.loss_forward(src, tgt_in, tgt_out, rng=rng)
        n = cache.loss.n_tokens
        model.loss_backward(cache, dloss=float(n))  # the gradient of the token-summed loss
        loss_sum += float(loss) * n
        nll_sum += cache.loss.nll_sum
        n_total += n
    if n_total == 0:
        raise ScratchformerError("the micro-batches hold no target tokens")
    for g in model.gradients().values():
        g *= 1.0 / n_total
    return loss_sum / n_total, nll_sum / n_total, n_total


# -- the loop --------------------------------------------------------------------------------
@dataclass
class TrainResult:
    step: int  # optimizer steps done in total
    losses: list  # [(step, training loss)] of the steps run in this call
    valid: list  # validation records of this call
    test: dict | None  # test metrics of the final model (averaged when average_last > 1)
    examples: list  # [(source, target, output)] texts
    checkpoint: Path | None  # the last checkpoint written
    run_dir: Path
    elapsed: float  # seconds spent in this call


def _dropout_seed(seed: int, step: int, micro: int) -> int:
    """A 63-bit seed for the dropout generator of micro-batch ``micro`` of step ``step``."""
    ss = backend.np.random.SeedSequence([seed, step, micro])
    return int(ss.generate_state(1, dtype=backend.np.uint64)[0] >> 1)


def truncate_metrics(path: Path, step: int) -> None:
    """Keep the records of a metrics log up to ``step`` (a resumed run logs the rest
    again); test and error records go, and so does a line cut short by a crash."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("step", 0) <= step and rec.get("kind") not in ("test", "error"):
            keep.append(line)
    path.write_text("".join(line + "\n" for line in keep))


class _Window:
    """Running sums over the steps between two "train" records of the metrics log."""

    def __init__(self):
        self.loss = self.nll = 0.0
        self.tokens = self.steps = 0
        self.t0 = time.perf_counter()

    def add(self, rec: dict) -> None:
        self.loss += rec["loss"]
        self.nll += rec["nll"]
        self.tokens += rec["tokens"]
        self.steps += 1

    def tokens_per_s(self) -> float:
        """Non-pad target tokens per second of wall time."""
        return self.tokens / max(time.perf_counter() - self.t0, 1e-9)

    def record(self, step: int, epoch: int, rec: dict, tokens_seen: int) -> dict:
        return {
            "kind": "train",
            "step": step,
            "epoch": epoch,
            "loss": self.loss / self.steps,  # label-smoothed, mean over the window
            "ppl": math.exp(min(self.nll / self.steps, 700.0)),
            "lr": rec["lr"],
            "grad_norm": rec["grad_norm"],  # before clipping, of the last step
            "tokens_per_s": self.tokens_per_s(),
            "tokens_seen": tokens_seen,
        }


class Trainer:
    """Holds the model, optimizer, data and position of one run.

    ``Trainer(cfg).run()`` trains to ``cfg.train.max_steps``; ``resume`` (a checkpoint
    path, or "latest" for the newest in the run directory) continues a run exactly.
    """

    def __init__(
        self, cfg: TrainConfig, *, resume=None, overwrite=False, progress=True, echo=print
    ):
        cfg.validate()
        self.cfg, self.echo, self.progress = cfg, echo, progress
        self.run_dir = cfg.out_dir
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.metrics_path = self.run_dir / "metrics.jsonl"

        self.data = make_task(cfg.task)
        self.tokenizer = self.data.tokenizer
        self.train_pairs = self.data.encoded("train")
        self.valid_pairs = self.data.encoded("valid")
        self.test_pairs = self.data.encoded("test")
        self.sampler = TokenBatchSampler(
            example_widths(self.train_pairs),
            cfg.train.max_tokens,
            seed=cfg.seed,
            max_sentences=cfg.train.max_sentences or None,
        )
        self.model_config = build_model_config(cfg, len(self.tokenizer.vocab))
        self.model = Transformer(self.model_config)
        o = cfg.optim
        self.optimizer = Adam(self.model.parameters(), o.beta1, o.beta2, o.eps, o.weight_decay)
        self.schedule = make_schedule(
            o.schedule, d_model=self.model_config.d_model, warmup=o.warmup, factor=o.factor, lr=o.lr
        )
        # Position: optimizer steps done, and the next batch of the data order.
        self.step, self.epoch, self.batch_index = 0, 0, 0
        self.tokens_seen = 0
        self.seconds_before = 0.0  # training wall time of earlier sessions (resume)
        self.t_start = time.perf_counter()  # of this session
        self.last_checkpoint: Path | None = None

        if resume:
            self._resume(resume, overwrite)
        else:
            existing = list_checkpoints(self.ckpt_dir) if self.ckpt_dir.is_dir() else []
            if existing and not overwrite:
                raise ConfigError(
                    f"{self.run_dir} already holds checkpoints (up to step {existing[-1][0]}): "
                    "pass --resume to continue that run, --overwrite to start again there, "
                    "or --name/--run-dir for a new run"
                )
            for _, p in existing:
                p.unlink()
            (self.ckpt_dir / "averaged.npz").unlink(missing_ok=True)
            self.metrics_path.unlink(missing_ok=True)

    # -- state -------------------------------------------------------------------------------
    def train_state(self) -> dict:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "tokens_seen": self.tokens_seen,
            "seed": self.cfg.seed,
            "seconds": self.seconds_before + time.perf_counter() - self.t_start,
        }

    def meta(self) -> dict:
        return {
            "tokenizer": self.tokenizer.to_dict(),
            "train_config": self.cfg.to_dict(),
        }

    def save(self) -> Path:
        path = save_checkpoint(
            self.ckpt_dir / checkpoint_name(self.step),
            self.model,
            step=self.step,
            optimizer=self.optimizer,
            meta=self.meta(),
            train_state=self.train_state(),
        )
        self.last_checkpoint = path
        keep = self.cfg.train.keep_checkpoints
        if keep:
            for _, old in list_checkpoints(self.ckpt_dir)[:-keep]:
                old.unlink()
        return path

    def _resume(self, resume, overwrite: bool = False) -> None:
        if resume in (True, "latest"):
            path = latest_checkpoint(self.ckpt_dir)
            if path is None:
                raise CheckpointError(f"nothing to resume: no checkpoints in {self.ckpt_dir}")
        else:
            path = Path(resume)
        ck = load_checkpoint(path)
        if ck.config.to_dict() != self.model_config.to_dict():
            diff = {
                k: (v, self.model_config.to_dict()[k])
                for k, v in ck.config.to_dict().items()
                if self.model_config.to_dict()[k] != v
            }
            raise ConfigError(
                f"cannot resume from {path}: its model differs from this run's "
                f"(checkpoint vs run: {diff})"
            )
        stored_task = ck.meta.get("train_config", {}).get("task")
        if stored_task is not None:  # keys added since the checkpoint take their defaults
            stored_task = {**TaskConfig().to_dict(), **stored_task}
        if stored_task is not None and stored_task != self.cfg.task.to_dict():
            raise ConfigError(
                f"cannot resume from {path}: it was trained on different [task] settings, "
                "so its data order would not continue"
            )
        stored_tok = ck.meta.get("tokenizer")
        if stored_tok is not None and stored_tok != self.tokenizer.to_dict():
            raise ConfigError(
                f"cannot resume from {path}: its vocabulary differs from this run's "
                f"(the checkpoint's {stored_tok.get('type')} tokenizer has "
                f"{ck.config.vocab_size} ids, this run's {len(self.tokenizer.vocab)}); "
                f"was {self.cfg.task.data_dir or 'the data'} prepared again?"
            )
        if ck.optimizer_state is None or ck.train_state is None:
            raise CheckpointError(
                f"cannot resume from {path}: it holds no optimizer/training state"
            )
        self.model.load_state_dict(ck.model.state_dict())
        self.optimizer.load_state_dict(ck.optimizer_state)
        ts = ck.train_state
        if int(ts.get("seed", self.cfg.seed)) != self.cfg.seed:
            raise ConfigError(
                f"cannot resume from {path}: it was trained with seed {ts['seed']}, "
                f"this run has seed {self.cfg.seed}"
            )
        self.step, self.epoch, self.batch_index = ts["step"], ts["epoch"], ts["batch_index"]
        self.tokens_seen = ts.get("tokens_seen", 0)
        self.seconds_before = ts.get("seconds", 0.0)
        self.last_checkpoint = path
        self._drop_later_checkpoints(overwrite)
        self._truncate_metrics(self.step)

    def _drop_later_checkpoints(self, overwrite: bool) -> None:
        """Resuming from an older checkpoint abandons the steps after it: their checkpoints
        would otherwise be averaged into (or resumed by) this run. Refuse, unless
        ``overwrite`` says to delete them."""
        if not self.ckpt_dir.is_dir():
            return
        later = [(s, p) for s, p in list_checkpoints(self.ckpt_dir) if s > self.step]
        if later and not overwrite:
            raise ConfigError(
                f"{self.ckpt_dir} holds checkpoints after step {self.step} "
                f"({', '.join(p.name for _, p in later[:5])}{' ...' if len(later) > 5 else ''}) "
                "from the run this resume abandons: move them away, or pass --overwrite "
                "to delete them"
            )
        for _, p in later:
            p.unlink()
        if later:
            (self.ckpt_dir / "averaged.npz").unlink(missing_ok=True)

    def _truncate_metrics(self, step: int) -> None:
        truncate_metrics(self.metrics_path, step)

    def log(self, record: dict) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(record) + "\n")

    # -- one step ----------------------------------------------------------------------------
    def next_batch(self):
        """The next micro-batch of the data order; moves to the next epoch when needed."""
        batches = self.sampler.epoch(self.epoch)
        if self.batch_index >= len(batches):
            self.epoch, self.batch_index = self.epoch + 1, 0
            batches = self.sampler.epoch(self.epoch)
        idx = batches[self.batch_index]
        self.batch_index += 1
        return collate([self.train_pairs[i] for i in idx], indices=idx)

    def train_step(self) -> dict:
        """One optimizer step over ``accum_steps`` micro-batches (see the module doc)."""
        cfg = self.cfg
        s = self.step + 1
        batches = [self.next_batch() for _ in range(cfg.train.accum_steps)]
        rngs = [backend.rng(_dropout_seed(cfg.seed, s, i)) for i in range(len(batches))]
        loss, nll, n_total = accumulate_gradients(self.model, batches, rngs)
        if not math.isfinite(loss):
            self._diverged(s, f"the training loss is {loss}")
        grads = self.model.gradients()
        grad_norm = clip_grad_norm(grads, cfg.optim.clip_norm)
        if not math.isfinite(grad_norm):
            self._diverged(s, f"the gradient norm is {grad_norm}")
        lr = self.schedule(s)
        self.optimizer.step(grads, lr)
        self.step = s
        self.tokens_seen += n_total
        return {
            "step": s,
            "loss": loss,
            "nll": nll,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens": n_total,
        }

    def _diverged(self, step: int, what: str):
        last = (
            f"the last good checkpoint is {self.last_checkpoint} (continue with --resume)"
            if self.last_checkpoint
            else "no checkpoint was written yet"
        )
        msg = f"training stopped at step {step}: {what} (not finite); {last}"
        self.log({"kind": "error", "step": step, "message": msg})
        raise TrainingDiverged(msg)

    # -- the run -----------------------------------------------------------------------------
    def run(self, final_eval: bool = True) -> TrainResult:
        """Train to ``max_steps`` (validating and checkpointing on the way), then, with
        ``final_eval``, evaluate and decode the test set."""
        threads = self.cfg.train.threads
        limits = threadpool_limits(threads, user_api="blas") if threads else nullcontext()
        with limits:
            return self._run(final_eval)

    def _run(self, final_eval: bool) -> TrainResult:
        cfg, t = self.cfg, self.cfg.train
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
        if self.step == 0:
            dropped = getattr(self.data, "dropped", 0)
            if dropped:
                self.echo(
                    f"left out {dropped} training pairs longer than task.max_len="
                    f"{cfg.task.max_len} tokens"
                )
            self.echo(
                f"training {cfg.name}: task {cfg.task.name} ({len(self.train_pairs)} train / "
                f"{len(self.valid_pairs)} valid / {len(self.test_pairs)} test), "
                f"{self.model.num_parameters():,} parameters "
                f"(N={self.model_config.N}, d_model={self.model_config.d_model}, "
                f"h={self.model_config.h}), {len(self.sampler)} batches/epoch, "
                f"{t.max_steps} steps -> {self.run_dir}"
            )
        else:
            self.echo(f"resuming {cfg.name} at step {self.step} from {self.last_checkpoint}")

        losses, valid = [], []
        t_start = self.t_start = time.perf_counter()
        window = _Window()
        bar = tqdm(
            total=t.max_steps,
            initial=self.step,
            disable=not self.progress,
            unit="step",
            dynamic_ncols=True,
        )
        try:
            while self.step < t.max_steps:
                rec = self.train_step()
                s = self.step
                losses.append((s, rec["loss"]))
                window.add(rec)
                bar.update(1)
                bar.set_postfix(
                    loss=f"{rec['loss']:.3f}",
                    lr=f"{rec['lr']:.2e}",
                    tok_s=f"{window.tokens_per_s():,.0f}",
                    refresh=False,
                )
                last = s == t.max_steps
                if (t.log_every and s % t.log_every == 0) or last:
                    self.log(
                        {
                            **window.record(s, self.epoch, rec, self.tokens_seen),
                            # wall time since the run began (earlier sessions too)
                            "elapsed": self.seconds_before + time.perf_counter() - t_start,
                        }
                    )
                    window = _Window()
                t_aside = time.perf_counter()
                if (t.eval_every and s % t.eval_every == 0) or last:
                    m = evaluate(self.model, self.valid_pairs, t.max_tokens)
                    valid.append({"kind": "valid", "step": s, **m})
                    self.log(valid[-1])
                    bar.write(
                        f"step {s}: valid loss {m['loss']:.4f}  ppl {m['ppl']:.3f}  "
                        f"token acc {m['token_acc']:.2%}  seq acc {m['seq_acc']:.2%}"
                    )
                if (t.checkpoint_every and s % t.checkpoint_every == 0) or last:
                    self.save()
                window.t0 += time.perf_counter() - t_aside  # tokens/s: not validation, saving
        finally:
            bar.close()
        if self.last_checkpoint is None:
            self.save()

        test, examples = None, []
        if final_eval:
            test, examples = self.final_evaluation()
        return TrainResult(
            step=self.step,
            losses=losses,
            valid=valid,
            test=test,
            examples=examples,
            checkpoint=self.last_checkpoint,
            run_dir=self.run_dir,
            elapsed=time.perf_counter() - t_start,
        )

    def test_metrics(self, model: Transformer) -> tuple[dict, list]:
        """Teacher-forced metrics of ``model`` on the test set, plus the exact-sequence
        accuracy of real decoding (beam or greedy). Returns ``(metrics, outputs or None)``."""
        t = self.cfg.train
        m = evaluate(model, self.test_pairs, t.max_tokens)
        t0 = time.perf_counter()
        min_len = 1 if self.cfg.task.name == "translate" else 0  # never an empty sentence
        method, outputs = decode_outputs(
            model, self.test_pairs, t.decode, t.beam_size, t.alpha, min_len=min_len
        )
        if outputs is not None:
            right = [list(o) == list(y) for o, (_, y) in zip(outputs, self.test_pairs)]
            m["seq_acc_decoded"] = sum(right) / len(right)
            m["decode"] = method
            m["decode_seconds"] = time.perf_counter() - t0
            if self.cfg.task.name == "translate":
                m.update(self._bleu(outputs))
        return m, outputs

    def _bleu(self, outputs) -> dict:
        """sacreBLEU BLEU/chrF of decoded test outputs (empty when sacreBLEU is missing)."""
        from scratchformer.bleu import ScoringError, corpus_scores  # noqa: PLC0415

        hyps = [self.tokenizer.decode(o) for o in outputs]
        try:
            s = corpus_scores(hyps, [t for _, t in self.data.test])
        except ScoringError as e:
            self.echo(f"  (no BLEU: {e})")
            return {}
        return {k: s[k] for k in ("bleu", "chrf", "bleu_signature")}

    def average_model(self) -> tuple[Transformer, list] | tuple[None, list]:
        """The paper's checkpoint averaging: a model whose parameters are the mean of the
        last ``average_last`` checkpoints of this run (also saved as averaged.npz)."""
        n = self.cfg.train.average_last
        found = list_checkpoints(self.ckpt_dir) if self.ckpt_dir.is_dir() else []
        if n < 2 or len(found) < 2:
            return None, []
        paths = [p for _, p in found[-n:]]
        model = Transformer(self.model_config)
        model.load_state_dict(average_checkpoints(paths))
        meta = {**self.meta(), "averaged_from": [p.name for p in paths]}
        save_checkpoint(self.ckpt_dir / "averaged.npz", model, step=self.step, meta=meta)
        return model, [s for s, _ in found[-n:]]

    def final_evaluation(self):
        """Evaluate the last checkpoint and (with ``average_last``) the average of the last
        checkpoints on the held-out test set; print examples of the final model.

        Returns ``(metrics of the final model, [(source, target, output)])``; the final
        model is the averaged one when averaging is on.
        """
        t = self.cfg.train
        m_last, outputs = self.test_metrics(self.model)
        self.log({"kind": "test", "step": self.step, "model": "last", **m_last})
        avg_model, avg_steps = self.average_model()
        m = m_last
        if avg_model is not None:
            m, outputs = self.test_metrics(avg_model)
            self.log({"kind": "test", "step": self.step, "model": "averaged", **m})
        tok = self.tokenizer
        examples = []
        if outputs is not None:
            for (src, tgt), out in list(zip(self.data.test, outputs))[: t.examples]:
                examples.append((src, tgt, tok.decode(out)))

        self.echo(f"\nheld-out test set ({len(self.test_pairs)} sequences never seen in training):")
        for src, tgt, out in examples:
            if self.cfg.task.name == "translate":  # sentences: one per line, no verdict
                self.echo(f"  source:    {src}\n  reference: {tgt}\n  output:    {out}\n")
                continue
            verdict = "ok" if out == tgt else f"WRONG, want {tgt!r}"
            self.echo(f"  source {src!r:16} -> output {out!r:16} {verdict}")
        if outputs is None:
            self.echo(
                f"  exact-sequence accuracy (teacher-forced argmax, equal to greedy decoding; "
                f"scratchformer.decode is not installed): {m['seq_acc']:.2%}"
            )
            return m, examples
        how = (
            f"beam search, k={t.beam_size}, alpha={t.alpha}" if m["decode"] == "beam" else "greedy"
        )
        rows = [(f"last checkpoint (step {self.step})", m_last)]
        if avg_model is not None:
            steps = ", ".join(map(str, avg_steps))
            rows.append((f"average of the last {len(avg_steps)} checkpoints ({steps})", m))
        for label, mm in rows:
            bleu = f"BLEU {mm['bleu']:.2f}, chrF {mm['chrf']:.2f}, " if "bleu" in mm else ""
            self.echo(
                f"  {label}: {bleu}exact-sequence accuracy {mm['seq_acc_decoded']:.2%} ({how}), "
                f"token accuracy {mm['token_acc']:.2%}, perplexity {mm['ppl']:.3f}"
            )
        if "bleu_signature" in m:
            self.echo(f"  sacreBLEU signature: {m['bleu_signature']}")
        return m, examples


def train(
    cfg: TrainConfig | None = None,
    *,
    resume=None,
    overwrite=False,
    progress=True,
    echo=print,
    final_eval=True,
) -> TrainResult:
    """Train a run to ``cfg.train.max_steps`` (the default config when ``cfg`` is None)."""
    trainer = Trainer(
        cfg or TrainConfig(), resume=resume, overwrite=overwrite, progress=progress, echo=echo
    )
    return trainer.run(final_eval=final_eval)


__all__ = [
    "ConfigError",
    "LoopConfig",
    "OptimConfig",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingDiverged",
    "build_model_config",
    "decode_outputs",
    "evaluate",
    "train",
]
