"""The training configuration: one TOML format for every task.

    name = "my-run"          # top level: name, seed, run_dir
    [task]                   # what to learn: name = "reverse" | "copy" | "sort" |
    name = "copy"            #   "translate" | "lm" | "classify", and that task's settings
    [model]                  # TransformerConfig fields (plus "preset"), or init_from
    [optim]                  # Adam and the learning-rate schedule
    [train]                  # the loop: steps, batches, validation, checkpoints, ...

Every default is written once, in the shipped configs (package data, ``configs/``):
``defaults.toml`` holds the settings every task shares, and each task has a config that
holds its own (``reverse.toml`` for copy/reverse/sort, ``bible-cpu.toml`` for translate,
``lm.toml``, ``classify.toml``). A run's configuration is built in layers, each laid
over the one before:

    defaults.toml  <-  the task's config  <-  the user's file  <-  flags and --set

Sections merge key by key, except that a ``[model]`` naming a ``preset`` starts the
model again from that preset, and one naming ``init_from`` (a checkpoint) replaces it:
the run starts from that checkpoint's model and tokenizer, and no layer may set another
[model] key then. The result must give every key of every section; a key
that is unknown, of the wrong type, or that does not apply to the task is an error
naming it and where it came from. Keys renamed since earlier versions still work, with a
note naming the new key (``scratchformer.app.compat``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import unicodedata
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from scratchformer.app.compat import migrate_config
from scratchformer.app.train.tasks import TASKS
from scratchformer.app.train.tasks.base import TOKENIZER_KEYS
from scratchformer.engine.errors import ConfigError, need, wrong_field_types
from scratchformer.engine.models import TransformerConfig

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

TOP_LEVEL = ("name", "seed", "run_dir")
#: the values of ``[train] precision`` (engine/step.py)
PRECISIONS = ("float32", "float16")
SECTIONS = ("task", "model", "optim", "train")
#: the values of ``[train] best_metric`` (``train.best``); each task takes some of them
BEST_METRICS = ("nll", "bleu", "chrf", "accuracy")


@dataclass
class OptimConfig:
    """[optim]: Adam and the learning-rate schedule (defaults: configs/defaults.toml)."""

    schedule: str  # "noam" (the paper) or "constant" (linear warmup to lr)
    lr_factor: float  # noam: lr = lr_factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)
    lr: float  # constant: the learning rate after warmup
    warmup: int  # warmup steps (the paper: 4000)
    beta1: float
    beta2: float
    eps: float
    weight_decay: float  # decoupled (AdamW); the paper: 0
    clip_norm: float  # global gradient-norm clipping; 0 turns it off

    def check(self) -> None:
        need(
            self.schedule in ("noam", "constant"),
            f"optim.schedule={self.schedule!r}: expected 'noam' or 'constant'",
        )
        for k in ("lr_factor", "lr"):
            v = getattr(self, k)
            need(math.isfinite(v) and v > 0, f"optim.{k} must be a positive number, got {v}")
        need(self.warmup >= 0, f"optim.warmup must be >= 0, got {self.warmup}")
        for k in ("beta1", "beta2"):
            v = getattr(self, k)
            need(0 <= v < 1, f"optim.{k} must be in [0, 1), got {v}")
        need(math.isfinite(self.eps) and self.eps > 0, f"optim.eps must be > 0, got {self.eps}")
        for k in ("weight_decay", "clip_norm"):
            v = getattr(self, k)
            need(math.isfinite(v) and v >= 0, f"optim.{k} must be >= 0, got {v}")


@dataclass
class LoopConfig:
    """[train]: the loop (defaults: configs/defaults.toml)."""

    steps: int  # optimizer steps
    max_tokens: int  # token budget of one micro-batch (examples x padded width)
    max_sentences: int  # cap on examples per micro-batch; 0 = none
    accum_steps: int  # micro-batches per optimizer step
    time_limit: float  # seconds of training after which the run stops early; 0 = none
    log_every: int  # steps between "train" records
    eval_every: int  # steps between validations; 0 = only at the end
    eval_limit: int  # validate on the first N validation examples; 0 = all
    checkpoint_every: int  # steps between checkpoints; 0 = only at the end
    keep_checkpoints: int  # keep only the newest k checkpoints; 0 keeps all
    average_last: int  # final model = mean of the last k checkpoints; 0 = off
    test: bool  # judge the test set at the end
    examples: int  # test examples printed at the end
    threads: int  # BLAS threads; 0 = the BLAS default
    precision: str  # "float32", or "float16": mixed precision (engine/step.py)
    loss_scale: float  # mixed precision: the first loss scale (then dynamic)
    loss_scale_window: int  # mixed precision: good steps in a row that double the scale
    min_loss_scale: float  # mixed precision: a loss scale below this stops the run (diverged)
    max_skipped_share: float  # mixed precision: a log window skipping more (after step 100) too
    best_metric: str  # the dev metric of best.npz, early stopping and the final choice
    best_sentences: int  # bleu, chrf: dev sentences decoded (greedy) per validation; 0 = all
    patience: int  # stop after this many validations without a better best_metric; 0 = off
    tensorboard: bool  # TensorBoard event files in the run directory (the tensorboard extra)

    def check(self) -> None:
        need(
            self.best_metric in BEST_METRICS,
            f"train.best_metric={self.best_metric!r}: expected one of {', '.join(BEST_METRICS)}",
        )
        need(
            self.precision in PRECISIONS,
            f"train.precision={self.precision!r}: expected one of {', '.join(PRECISIONS)}",
        )
        for k in ("steps", "max_tokens", "accum_steps", "loss_scale_window"):
            need(getattr(self, k) >= 1, f"train.{k} must be >= 1, got {getattr(self, k)}")
        for k in ("loss_scale", "min_loss_scale"):
            v = getattr(self, k)
            need(math.isfinite(v) and v > 0, f"train.{k} must be a positive number, got {v}")
        need(
            0 < self.max_skipped_share <= 1,
            f"train.max_skipped_share must be in (0, 1] (1: never stop for skipped steps), got "
            f"{self.max_skipped_share}",
        )
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            need(isinstance(v, str) or v >= 0, f"train.{f.name} must be >= 0, got {v}")
        need(
            not (0 < self.keep_checkpoints < self.average_last),
            f"train.keep_checkpoints = {self.keep_checkpoints} is fewer than train.average_last "
            f"= {self.average_last}: the final average reads the last {self.average_last} "
            "checkpoints (keep more, or average fewer)",
        )
        need(
            math.isfinite(self.time_limit),
            f"train.time_limit must be finite, got {self.time_limit} (0 = no limit)",
        )


@dataclass
class TrainConfig:
    """A whole run, every setting given. Build one with ``TrainConfig.load(file or
    shipped name)`` or ``TrainConfig.from_dict({...})`` (laid over the shipped defaults);
    ``to_dict()`` is what config.json and every checkpoint store."""

    name: str  # the run's name; outputs go to runs/<name>
    seed: int  # model initialisation, data order and dropout
    run_dir: str  # "" = runs/<name>
    task: object  # the [task] settings: a dataclass of the task's own (its ``Settings``)
    model: dict  # TransformerConfig fields, plus "preset"
    optim: OptimConfig
    train: LoopConfig
    notes: list = field(default_factory=list, compare=False, repr=False)  # renamed keys etc.

    @property
    def out_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path("runs") / self.name

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "seed": self.seed,
            "run_dir": self.run_dir,
            "task": asdict(self.task),
            "model": dict(self.model),
            "optim": asdict(self.optim),
            "train": asdict(self.train),
        }

    @classmethod
    def from_dict(cls, d: dict, origin: str = "the config") -> TrainConfig:
        """``d`` (any subset of the sections and keys) laid over the shipped defaults."""
        return build([(d, origin)])

    @classmethod
    def load(cls, source, overrides: dict | None = None) -> TrainConfig:
        """A config file or a shipped config's name (``"copy"``), with ``overrides``."""
        d, label = read_config(source)
        return build([(d, label)] + ([(overrides, "the overrides")] if overrides else []))

    @classmethod
    def default(cls) -> TrainConfig:
        """The default run (``scratchformer train`` with no arguments)."""
        return build([])

    @classmethod
    def from_stored(cls, d: dict, origin: str) -> TrainConfig:
        """The configuration stored in a checkpoint or config.json, by this version or an
        earlier one (renamed keys are renamed; keys the task no longer has are dropped)."""
        if not isinstance(d, dict):
            raise ConfigError(f"{origin} holds no training configuration")
        notes: list = []
        return build([(migrate(d, origin, notes, stored=True), origin)], notes)


# -- files ----------------------------------------------------------------------------------
def shipped_names() -> list[str]:
    """The names of the shipped configs (``configs/<name>.toml``)."""
    folder = resources.files("scratchformer.app") / "configs"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def _parse(text: bytes, label: str) -> dict:
    """The TOML of a config file. A UTF-8 byte order mark at its start (some editors
    write one) is dropped, as in every text file the program reads."""
    try:
        return tomllib.loads(text.decode("utf-8").removeprefix("\ufeff"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{label} is not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{label} is not valid TOML: {e}") from None
    except RecursionError:  # Python's TOML reader recurses once per level of nesting
        raise ConfigError(
            f"{label} nests arrays or tables deeper than a TOML reader follows: a config "
            "is a few tables of plain settings"
        ) from None


def read_config(source) -> tuple[dict, str]:
    """``(dict, label)`` of a TOML file, or of the shipped config named ``source``
    ("copy" or "copy.toml") when no such file exists."""
    path = Path(source)
    if path.is_file():
        try:
            return _parse(path.read_bytes(), str(path)), str(path)
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    name = path.name[: -len(".toml")] if path.name.endswith(".toml") else path.name
    if path.parent == Path(".") and name in shipped_names():
        ref = resources.files("scratchformer.app") / "configs" / f"{name}.toml"
        return _parse(ref.read_bytes(), f"configs/{name}.toml"), f"configs/{name}.toml"
    raise ConfigError(f"no config file at {source} (shipped configs: {', '.join(shipped_names())})")


def parse_value(text: str):
    """A ``--set`` value: TOML (``128``, ``0.1``, ``true``, ``"x"``); anything else is a
    string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):  # not TOML, or nested past reading
        return text


def override_value(dotted: str, text: str):
    """The value of ``--set dotted=text``: the text itself for a setting that holds text
    (``--set name=2024`` names a run "2024"), else ``parse_value(text)``."""
    value = parse_value(text)
    return text if dotted in _text_keys() and not isinstance(value, str) else value


def _text_keys() -> set:
    keys = {"name", "run_dir", "model.preset", "model.init_from"}
    tables = [("optim", OptimConfig), ("model", TransformerConfig)]
    tables += [("task", t.Settings) for t in TASKS.values()]
    for section, cls in tables:
        keys |= {f"{section}.{f.name}" for f in dataclasses.fields(cls) if f.type == "str"}
    return keys


def set_dotted(d: dict, dotted: str, value) -> None:
    """``d[section][key] = value`` for ``section.key`` (``d[key]`` for a top-level key)."""
    parts = dotted.split(".")
    if len(parts) > 2 or not all(p.strip() for p in parts):
        raise ConfigError(f"cannot set {dotted!r}: expected KEY or SECTION.KEY")
    if len(parts) == 1:
        d[parts[0]] = value
        return
    section = d.setdefault(parts[0], {})
    if not isinstance(section, dict):
        raise ConfigError(f"cannot set {dotted!r}: {parts[0]} is not a section")
    section[parts[1]] = value


# -- layers ---------------------------------------------------------------------------------
def migrate(d: dict, label: str, notes: list, stored: bool = False) -> dict:
    """``d`` in the current layout (``compat.migrate_config``: renamed keys, the former
    flat lm/classify settings, a note each). ``stored``: written by a trainer
    (config.json, a checkpoint), where keys its task no longer has are dropped."""
    return migrate_config(d, label, notes, _task_fields if stored else None)


def _task_fields(name) -> set | None:
    """The fields of task ``name``'s settings now (None for a task we do not know)."""
    return {f.name for f in dataclasses.fields(TASKS[name].Settings)} if name in TASKS else None


def _merge(base: dict, over: dict, label: str, origins: dict) -> dict:
    """``over`` laid over ``base`` (see the module doc); ``origins`` (dotted key -> the
    label of the layer that set it) is updated in place."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for k, v in over.items():
        if k in SECTIONS and isinstance(v, dict) and isinstance(out.get(k), dict):
            if k == "model" and ("preset" in v or "init_from" in v):
                # a preset starts the model again; a checkpoint replaces it
                out[k] = dict(v)
                for o in [o for o in origins if o.startswith("model.")]:
                    del origins[o]
            else:
                out[k].update(v)
            for key in v:
                origins[f"{k}.{key}"] = label
        else:
            out[k] = v
            origins[k] = label
    return out


def _shipped(name: str, notes: list) -> tuple[dict, str]:
    d, label = read_config(name)
    return migrate(d, label, notes), label


def build(layers: list, notes: list | None = None) -> TrainConfig:
    """The TrainConfig of ``layers`` (``[(dict, label)]``, lowest first) laid over the
    shipped defaults and the config of their task."""
    notes = [] if notes is None else notes
    layers = [(migrate(d, label, notes), label) for d, label in layers]
    defaults = _shipped("defaults", notes)
    name = defaults[0]["task"]["name"]
    for d, _ in layers:
        if isinstance(d.get("task"), dict) and "name" in d["task"]:
            name = d["task"]["name"]
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}: expected one of {sorted(TASKS)}")
    _check_init_from(layers)
    origins: dict = {}
    merged: dict = {}
    for d, label in [defaults, _shipped(TASKS[name].config, notes), *layers]:
        merged = _merge(merged, d, label, origins)
    cfg = _typed(merged, origins)
    cfg.notes = notes
    return cfg


def _check_init_from(layers: list) -> None:
    """A run that starts from a checkpoint (``[model] init_from``, ``--init-from``) has its
    model: a [model] key of any layer (a config file, --set) is refused in one line."""
    given = [(k, lab) for d, lab in layers if isinstance(d.get("model"), dict) for k in d["model"]]
    if not any(k == "init_from" for k, _ in given):
        return
    other = [(k, label) for k, label in given if k != "init_from"]
    if other:
        key, label = other[0]
        raise ConfigError(
            f"model.{key} (from {label}) cannot be set with --init-from (model.init_from): the "
            "model is the checkpoint's, its config and its tokenizer"
        )


def _where(origins: dict, dotted: str) -> str:
    return f" (from {origins[dotted]})" if dotted in origins else ""


def _guess(key: str, known) -> str:
    """`` (did you mean 'steps'?)`` for a key close to a known one, else ''."""
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _section(cls, d: dict, section: str, origins: dict, name: str = ""):
    known = [f.name for f in dataclasses.fields(cls)]
    for key in d:
        if key in known:
            continue
        others = {f.name for t in TASKS.values() for f in dataclasses.fields(t.Settings)}
        if section == "task" and key in others:
            raise ConfigError(
                f"task.{key}{_where(origins, f'task.{key}')} does not apply to task {name}, "
                f"whose settings are {', '.join(known[1:])}"
            )
        raise ConfigError(
            f"unknown key {key!r} in [{section}]{_where(origins, f'{section}.{key}')}"
            f"{_guess(key, known)}: expected one of {', '.join(known)}"
        )
    missing = [k for k in known if k not in d]
    if missing:
        raise ConfigError(f"[{section}] lacks {', '.join(missing)}")
    for wrong in wrong_field_types(cls, d):
        key = wrong.split()[0]
        raise ConfigError(f"{section}.{wrong}{_where(origins, f'{section}.{key}')}")
    obj = cls(**d)
    obj.check()
    return obj


def _typed(d: dict, origins: dict) -> TrainConfig:
    unknown = sorted(k for k in d if k not in TOP_LEVEL and k not in SECTIONS)
    if unknown:
        raise ConfigError(
            f"unknown top-level key {unknown[0]!r}{_where(origins, unknown[0])}"
            f"{_guess(unknown[0], TOP_LEVEL + SECTIONS)}: expected "
            f"{', '.join(TOP_LEVEL)} or the sections [{'] ['.join(SECTIONS)}]"
        )
    for section in SECTIONS:
        if not isinstance(d.get(section), dict):
            raise ConfigError(
                f"[{section}] must be a table of settings, got {d.get(section)!r}"
                f"{_where(origins, section)}"
            )
    top = {k: d[k] for k in TOP_LEVEL}
    wrong = [
        f"{k} must be {what}, got {top[k]!r}{_where(origins, k)}"
        for k, t, what in (("name", str, "text"), ("seed", int, "a whole number"))
        + (("run_dir", str, "text"),)
        if not isinstance(top[k], t) or isinstance(top[k], bool)
    ]
    need(not wrong, "; ".join(wrong))
    need(top["name"] != "" or top["run_dir"] != "", "the run needs a name (or a run_dir)")
    control = [c for c in top["name"] if unicodedata.category(c) in ("Cc", "Cf")]
    need(
        not control,
        f"name {top['name']!r}{_where(origins, 'name')} holds a control character "
        f"({control[0]!r}, a tab, a line break or a terminal escape) that every line naming "
        "the run would print: choose a name of letters, digits and punctuation"
        if control
        else "",
    )
    need(
        top["name"] == "" or is_run_name(top["name"]),
        f"name {top['name']!r}{_where(origins, 'name')} is not a run name: one folder name "
        "under runs/ (no /, not . or ..); to write elsewhere, give --run-dir",
    )
    need(top["seed"] >= 0, f"seed must be >= 0, got {top['seed']}")
    task_name = d["task"]["name"]
    task = _section(TASKS[task_name].Settings, d["task"], "task", origins, task_name)
    _check_model_keys(d["model"], origins)
    train = _section(LoopConfig, d["train"], "train", origins)
    metrics = TASKS[task_name].best_metrics
    need(
        train.best_metric in metrics,
        f"train.best_metric={train.best_metric!r}{_where(origins, 'train.best_metric')} does "
        f"not apply to task {task_name}, whose dev metrics are {', '.join(metrics)}",
    )
    return TrainConfig(
        **top,
        task=task,
        model=dict(d["model"]),
        optim=_section(OptimConfig, d["optim"], "optim", origins),
        train=train,
    )


def is_run_name(name: str) -> bool:
    """A run's name is one path component: the folder of the run under runs/."""
    return (
        name not in (".", "..")
        and not any(c in name for c in "/\\\0")
        and name.strip() == name != ""
        and len(name.encode("utf-8", "surrogatepass")) <= 255
    )


def _check_model_keys(model: dict, origins: dict) -> None:
    """[model] holds TransformerConfig fields and "preset", or "init_from" alone (a
    checkpoint); the tokenizer sets the vocabulary's size and special ids. (Values are
    checked when the model is built.)"""
    fields = {f.name for f in dataclasses.fields(TransformerConfig)}
    for key in model:
        where = _where(origins, f"model.{key}")
        if key == "init_from":
            if not isinstance(model[key], str) or not model[key]:
                raise ConfigError(f"model.init_from{where} must name a checkpoint file")
            continue
        if key in TOKENIZER_KEYS:
            raise ConfigError(f"model.{key}{where} is set by the tokenizer, not the config")
        if key not in fields and key != "preset":
            raise ConfigError(
                f"unknown key {key!r} in [model]{where}{_guess(key, fields | {'preset'})}: "
                f"expected preset, init_from or one of "
                f"{', '.join(sorted(fields - set(TOKENIZER_KEYS)))}"
            )
    if not isinstance(model.get("preset", ""), str):
        raise ConfigError(f"model.preset must be text, got {model['preset']!r}")
    for wrong in wrong_field_types(TransformerConfig, model):
        key = wrong.split()[0]
        raise ConfigError(f"model.{wrong}{_where(origins, f'model.{key}')}")


__all__ = [
    "LoopConfig",
    "OptimConfig",
    "TrainConfig",
    "build",
    "migrate",
    "override_value",
    "parse_value",
    "read_config",
    "set_dotted",
    "shipped_names",
]
