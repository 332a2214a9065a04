"""Compatibility with earlier versions (scratchformer/app/compat.py): each older form is read
as its current one, with a note where the user should change something, and
docs/compatibility.md lists every one of them with the version that drops them."""

import re
from pathlib import Path

from scratchformer import __version__
from scratchformer.app import compat

DOC = (Path(__file__).resolve().parents[1] / "docs" / "compatibility.md").read_text()


def test_renamed_keys_are_read_under_their_new_names_with_a_note():
    notes = []
    d = compat.migrate_config(
        {"train": {"max_steps": 9, "decode": "auto"}, "optim": {"factor": 2.0}}, "x.toml", notes
    )
    assert d == {"train": {"steps": 9}, "optim": {"lr_factor": 2.0}, "task": {"decode": "beam"}}
    assert notes == [
        "note: train.max_steps is now called train.steps (in x.toml)",
        "note: optim.factor is now called optim.lr_factor (in x.toml)",
        "note: train.decode is now called task.decode (in x.toml)",
        "note: task.decode = 'auto' is now 'beam' (in x.toml)",
    ]


def test_a_new_name_given_beside_the_old_one_wins():
    d = compat.migrate_config({"train": {"max_steps": 9, "steps": 4}}, "x", [])
    assert d == {"train": {"steps": 4}}


def test_the_former_flat_layout_is_read_in_sections():
    notes = []
    flat = {"task": "lm", "steps": 5, "lr": 0.01, "data_dir": "d", "seed": 2, "model": {"N": 1}}
    d = compat.migrate_config(flat, "run.npz", notes)
    assert d == {
        "task": {"name": "lm", "data_dir": "d"},
        "train": {"steps": 5},
        "optim": {"lr": 0.01},
        "seed": 2,
        "model": {"N": 1},
        "name": "lm",
    }
    assert notes == [
        "note: run.npz holds lm/classify settings of the former layout, now read as [task], "
        "[optim] and [train]"
    ]


def test_a_stored_config_drops_the_keys_its_task_no_longer_has():
    fields = {"lm": {"name", "data_dir"}}.get
    d = compat.migrate_config({"task": {"name": "lm", "gone": 1, "data_dir": "d"}}, "x", [], fields)
    assert d["task"] == {"name": "lm", "data_dir": "d"}
    other = compat.migrate_config({"task": {"name": "new", "gone": 1}}, "x", [], fields)
    assert other["task"] == {"name": "new", "gone": 1}  # a task it does not know: kept


def test_a_flat_override_key_is_renamed_with_a_note():
    notes = []
    assert compat.flat_override("steps", notes) == "train.steps"
    assert compat.flat_override("seed", notes) == "seed"  # a top-level key stays
    assert compat.flat_override("train.steps", notes) == "train.steps"
    assert notes == ["note: --set steps is now --set train.steps"]


def test_a_header_without_a_model_class_is_told_by_its_task():
    assert compat.model_spec_of({"model": {"class": "LanguageModel"}}) == {"class": "LanguageModel"}
    assert compat.model_spec_of({}) == {"class": "Transformer"}
    assert compat.model_spec_of({"meta": {"task": "lm"}}) == {"class": "LanguageModel"}
    spec = compat.model_spec_of({"meta": {"task": "classify", "labels": ["a", "b", "c"]}})
    assert spec == {"class": "EncoderClassifier", "num_classes": 3}


def test_the_task_of_a_checkpoint_without_meta_task():
    assert compat.task_of({"task": "sort"}) == "sort"
    assert compat.task_of({"train_config": {"task": {"name": "copy"}}}) == "copy"
    assert compat.task_of({"train_config": {"task": "lm"}}) == "lm"  # the former layout
    assert compat.task_of({}) is None


def test_an_earlier_training_state_is_read_as_the_current_one():
    assert compat.train_state({"step": 3, "tokens": 70}) == {
        "step": 3,
        "tokens_seen": 70,
        "ranks": 1,
    }
    now = {"step": 3, "tokens_seen": 70, "ranks": 2}
    assert compat.train_state(now) == now


def test_the_former_data_layout_is_read_where_the_new_one_is_missing(tmp_path):
    (tmp_path / "web.train.txt").write_text("a\n")
    assert compat.split_file(tmp_path, "train", "txt", "web") == tmp_path / "web.train.txt"
    (tmp_path / "train.txt").write_text("b\n")
    assert compat.split_file(tmp_path, "train", "txt", "web") == tmp_path / "train.txt"
    assert compat.split_file(tmp_path, "dev", "txt", "web") == tmp_path / "dev.txt"


def test_the_policy_page_lists_every_older_name_and_the_version_that_drops_them():
    for old in [*compat.RENAMED, *compat.TRAIN_STATE_RENAMED]:
        assert f"`{old}`" in DOC, old
    assert "former lm/classify settings" in DOC  # the flat keys, as a family
    assert f"Until version {compat.ACCEPTED_UNTIL}" in DOC
    assert f"this is version {__version__}" in DOC
    major = [int(x) for x in re.findall(r"\d+", __version__)[:2]]
    assert major < [int(x) for x in compat.ACCEPTED_UNTIL.split(".")]


def test_a_checkpoint_written_before_the_model_options_reads_as_the_model_it_was(tmp_path):
    """The fixtures (written at 7ad2f11) have no attention_bias, scale_embedding or
    zero_start: they read as the model they were (no biases, embeddings scaled, the
    decoder starting from its start token); a checkpoint that has the options keeps them
    through a save and a load."""
    from scratchformer.app.checkpoint import load_checkpoint, read_header, save_checkpoint
    from scratchformer.engine.models import LanguageModel, TransformerConfig

    fixture = Path(__file__).parent / "fixtures" / "checkpoints_7ad2f11" / "lm.npz"
    assert not set(compat.ADDED_MODEL_FIELDS) & set(read_header(fixture)["config"])
    cfg = load_checkpoint(fixture).config
    assert (cfg.attention_bias, cfg.scale_embedding, cfg.zero_start) == (False, True, False)
    assert not compat.model_config({"vocab_size": 5, "scale_embedding": False})["scale_embedding"]
    options = dict(attention_bias=True, scale_embedding=False, pad_id=11, bos_id=10, eos_id=10)
    model = LanguageModel(TransformerConfig.preset("tiny", vocab_size=11, **options))
    path = save_checkpoint(tmp_path / "options.npz", model)
    back = load_checkpoint(path)
    assert back.config == model.config
    assert "decoder.layers.0.self_attn.b_v" in back.model.parameters()


def test_the_policy_page_lists_the_added_model_fields():
    for field in compat.ADDED_MODEL_FIELDS:
        assert f"`{field}`" in DOC, field
