"""One config format for every task: the shipped configs (package data), their layers,
each default written once, renamed keys, and errors that name the key and its source."""

import argparse

import pytest

from scratchformer.app.commands.train import add_parser, resolve_config
from scratchformer.app.train import TASKS, ConfigError, TrainConfig, shipped_names
from scratchformer.app.train.config import build, read_config
from scratchformer.app.train.final import averaging_window
from scratchformer.app.train.resume import resume_changes


def parse(*argv):
    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    return sub.choices["train"].parse_args(list(argv))


def test_the_default_run_is_reverse_toml_over_the_defaults():
    default = TrainConfig.default()
    assert default == TrainConfig.load("reverse") == resolve_config(parse())[0]
    assert default.name == "reverse" and default.task.name == "reverse"
    assert default.train.steps == 3000 and default.optim.warmup == 400


@pytest.mark.parametrize("name", [n for n in shipped_names() if n != "defaults"])
def test_every_shipped_config_is_complete_and_valid(name):
    cfg = TrainConfig.load(name)
    assert cfg.task.name in TASKS and cfg.name == name and not cfg.notes


@pytest.mark.parametrize("name", [n for n in shipped_names() if n != "defaults"])
def test_every_shipped_config_averages_as_many_checkpoints_as_it_asks(name):
    """The average takes checkpoints of the last 20% of the steps only: a config whose
    checkpoints are too far apart would average fewer than its ``average_last``."""
    t = TrainConfig.load(name).train
    saved = [(s, None) for s in range(t.checkpoint_every, t.steps, t.checkpoint_every)]
    window = averaging_window([*saved, (t.steps, None)], t.average_last, t.steps)
    assert len(window) == t.average_last


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and not prefix:
            out.update(_flat(v, f"{k}."))
        else:
            out[prefix + k] = v
    return out


@pytest.mark.parametrize("name", [n for n in shipped_names() if n != "defaults"])
def test_no_shipped_config_repeats_a_default(name):
    """Each default is written in one place: a shipped config sets only what differs
    from the layers below it (defaults.toml, and the task's config if it is another)."""
    own, _ = read_config(name)
    below = [read_config("defaults")[0]]
    root = TASKS[own["task"]["name"]].config
    if root != name:
        below.append(read_config(root)[0])
    merged = {}
    for layer in below:
        merged.update(_flat(layer))
    repeated = [k for k, v in _flat(own).items() if k in merged and merged[k] == v]
    assert repeated in ([], ["task.name"]), f"{name}.toml repeats {repeated}"


def test_train_help_lists_every_shipped_config(capsys):
    with pytest.raises(SystemExit):
        parse("--help")
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    for name in shipped_names():
        assert name == "defaults" or name in shown, name


def test_layers_file_over_task_config_over_defaults_then_flags(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\n[task]\nname = "copy"\n[train]\nsteps = 77\n')
    cfg, _ = resolve_config(parse("--config", str(p), "--warmup", "9", "--set", "model.N=1"))
    assert (cfg.name, cfg.task.name, cfg.train.steps, cfg.optim.warmup) == ("mine", "copy", 77, 9)
    assert cfg.task.symbols == 10 and cfg.task.decode == "beam"  # from reverse.toml
    assert cfg.train.log_every == 50  # from defaults.toml
    assert cfg.model == {**TrainConfig.default().model, "N": 1}
    # --task picks the task's own config: the same as --config of it
    assert resolve_config(parse("--task", "lm"))[0] == TrainConfig.load("lm")
    assert resolve_config(parse("--task", "classify"))[0] == TrainConfig.load("classify")


def test_a_model_naming_a_preset_starts_again_from_it(tmp_path):
    p = tmp_path / "small.toml"
    p.write_text('[model]\npreset = "small"\n')
    cfg, _ = resolve_config(parse("--config", str(p), "--set", "model.N=1"))
    assert cfg.model == {"preset": "small", "N": 1}  # reverse.toml's d_model=64 is gone
    cfg, _ = resolve_config(parse("--set", "model.d_model=32", "--steps", "7"))
    assert cfg.model == {**TrainConfig.default().model, "d_model": 32} and cfg.train.steps == 7


def test_renamed_keys_still_work_with_a_note(tmp_path, capsys):
    """A config of the earlier format: max_steps, factor, and the decoding settings in
    [train] (with decode = "auto")."""
    p = tmp_path / "old.toml"
    p.write_text("[optim]\nfactor = 2.0\n[train]\nmax_steps = 12\ndecode = 'auto'\nbeam_size = 3\n")
    cfg = TrainConfig.load(p)
    assert cfg.train.steps == 12 and cfg.optim.lr_factor == 2.0
    assert cfg.task.decode == "beam" and cfg.task.beam_size == 3
    assert cfg.notes == [
        f"note: train.max_steps is now called train.steps (in {p})",
        f"note: optim.factor is now called optim.lr_factor (in {p})",
        f"note: train.decode is now called task.decode (in {p})",
        f"note: train.beam_size is now called task.beam_size (in {p})",
        f"note: task.decode = 'auto' is now 'beam' (in {p})",
    ]
    # the former lm/classify grammar: --set KEY=VALUE without a section
    cfg, _ = resolve_config(parse("--task", "lm", "--set", "steps=5"))
    assert cfg.train.steps == 5
    assert "note: --set steps is now --set train.steps" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--set", "optim.lr_max=1"],
            "unknown key 'lr_max' in [optim] (from --set optim.lr_max=1)",
        ),
        (["--set", "epochs=3"], "unknown top-level key 'epochs' (from --set epochs=3)"),
        (["--set", "task.name=paraphrase"], "unknown task 'paraphrase'"),
        (
            ["--set", "model.vocab_size=10"],
            "model.vocab_size (from --set model.vocab_size=10) is set by the tokenizer",
        ),
        (["--set", "model.d_mdoel=10"], "unknown key 'd_mdoel' in [model]"),
        (["--set", "model=5"], "[model] must be a table of settings, got 5 (from --set model=5)"),
        (
            ["--set", "train.steps=abc"],
            "train.steps must be a whole number, got 'abc' (from --set train.steps=abc)",
        ),
        (["--set", "task.max_len=abc"], "task.max_len must be a whole number, got 'abc'"),
        (["--set", "optim.warmup=1.5"], "optim.warmup must be a whole number"),
        (["--set", "seed=abc"], "seed must be a whole number, got 'abc'"),
        (["--set", "seed=-1"], "seed must be >= 0, got -1"),
        (["--set", "optim.lr_factor=-1"], "optim.lr_factor must be a positive number, got -1"),
        (["--set", "optim.lr_factor=inf"], "optim.lr_factor must be a positive number, got inf"),
        (["--set", "train.time_limit=inf"], "train.time_limit must be finite"),
        (["--set", "train.steps=0"], "train.steps must be >= 1, got 0"),
        (["--set", "a.b.c=1"], "cannot set 'a.b.c': expected KEY or SECTION.KEY"),
    ],
)
def test_bad_settings_are_named_with_their_source(argv, message):
    with pytest.raises(ConfigError) as e:
        resolve_config(parse(*argv))
    assert message in str(e.value)


def test_text_settings_keep_the_text(tmp_path):
    cfg, _ = resolve_config(parse("--set", "name=2024", "--set", "model.norm=pre"))
    assert cfg.name == "2024" and cfg.model["norm"] == "pre"


def test_a_stored_config_round_trips_and_resume_changes_are_listed():
    cfg = TrainConfig.load("bible-cpu")
    assert TrainConfig.from_stored(cfg.to_dict(), "config.json") == cfg
    later = build([(cfg.to_dict(), "x"), ({"train": {"steps": 3000, "threads": 2}}, "flags")])
    assert resume_changes(later, cfg) == []  # only when to stop and the threads changed
    other = build([(cfg.to_dict(), "x"), ({"train": {"max_tokens": 200}, "seed": 1}, "flags")])
    assert resume_changes(other, cfg) == ["seed", "train.max_tokens"]


def test_the_configs_are_package_data():
    """`pip install .` (not editable) ships them: they are read through importlib."""
    assert {
        "defaults",
        "reverse",
        "copy",
        "sort",
        "reverse-accum",
        "bible-cpu",
        "bible-gpu",
        "lm",
        "classify",
    } <= set(shipped_names())
    d, label = read_config("lm.toml")
    assert label == "configs/lm.toml" and d["task"]["name"] == "lm"
    with pytest.raises(ConfigError, match="no config file at nope.toml \\(shipped configs: "):
        read_config("nope.toml")
