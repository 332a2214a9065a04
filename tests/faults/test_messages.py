"""Messages that name the real cause and the real fix.

Each case is a mistake whose message once pointed elsewhere: a FIFO or a directory where
a data file goes ("not found"), a config whose data comes from ``data pairs`` (advised
``data bible``), an argument that is not UTF-8 (advised an output encoding), a TOML file
nested past reading (a bare recursion error) or starting with a byte order mark
(refused), a data size beyond the memory (advised a smaller micro-batch after minutes),
a float32 gradient check (FAILED, no why), a negative or huge ``--h`` (argparse's
"expected one argument", or accepted), a checkpoint whose weights overflow (raw NumPy
warnings, then blamed on the decoding options), run names with control characters
(printed raw), a file that is not a checkpoint ("truncated or corrupted").
"""

import os
import sys

import numpy as np
import pytest
from task_data import TINY_RUN

from scratchformer.app.cli import main
from scratchformer.engine import memory


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _translation_data(d):
    d.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        (d / f"{split}.tsv").write_text("abc\tcba\nde\ted\n", encoding="utf-8")
    return d


# -- a data file that is not a file ---------------------------------------------------------
@pytest.mark.parametrize("shape", ["directory", "fifo"])
@pytest.mark.parametrize("reader", ["evaluate", "train translate", "train lm"])
def test_a_directory_or_fifo_where_a_data_file_goes_is_named_as_such(
    here, refused, tiny_checkpoint, shape, reader
):
    data = here / "data"
    if reader == "train lm":
        data.mkdir()
        for split in ("train", "dev", "test"):
            (data / f"{split}.txt").write_text("in the beginning\n", encoding="utf-8")
        bad = data / "dev.txt"
        argv = ["train", "--task", "lm", "--data-dir", str(data), "--steps", "1", "--run-dir", "r"]
    else:
        _translation_data(data)
        bad = data / ("test.tsv" if reader == "evaluate" else "dev.tsv")
        argv = (
            ["evaluate", "--checkpoint", str(tiny_checkpoint), "--data-dir", str(data)]
            if reader == "evaluate"
            else ["train", "--config", "pairs", "--data-dir", str(data), "--run-dir", "r"]
        )
    bad.unlink()
    if shape == "directory":
        bad.mkdir()
        what = "is a directory, not a file"
    else:
        os.mkfifo(bad)
        what = "is a named pipe (FIFO), not a file"
    line = refused(argv, f"{bad} {what}")
    assert "not found" not in line and "data bible" not in line


def test_the_pairs_config_without_its_data_names_data_pairs(here, refused):
    line = refused(["train", "--config", "pairs", "--steps", "1"], "data/pairs/train.tsv not found")
    assert "scratchformer data pairs FILE --out data/pairs" in line


# -- arguments that are not UTF-8 -----------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["train", *TINY_RUN, "--name", "run\udcff"],
        ["generate", "--checkpoint", "x.npz", "--prompt", "\udce9t\udce9"],
    ],
    ids=["run name", "prompt"],
)
def test_an_argument_that_is_not_utf8_is_named_not_the_output_encoding(here, refused, argv):
    """Python keeps each byte of an argument that is not UTF-8 as a lone surrogate."""
    line = refused(argv, "is not UTF-8 text (byte 0x", "give it as UTF-8")
    assert "PYTHONIOENCODING" not in line


@pytest.mark.parametrize("name", ["a\tb", "a\nb", "a\x01b", "a\x1b[31mred", "a\u200bb"])
def test_a_run_name_with_a_control_character_is_refused(here, refused, name):
    line = refused(["train", *TINY_RUN, "--name", name], "holds a control character")
    assert "\x1b" not in line and not list(here.iterdir())


# -- config files ---------------------------------------------------------------------------
def test_a_toml_nested_past_reading_names_the_file(here, refused):
    (here / "deep.toml").write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    line = refused(["train", "--config", "deep.toml"], "deep.toml nests arrays or tables")
    assert "recursion" not in line


def test_a_toml_starting_with_a_byte_order_mark_is_read(here, capsys):
    (here / "bom.toml").write_bytes(b'\xef\xbb\xbfname = "bom"\n[train]\nsteps = 1\n')
    argv = ["train", "--config", "bom.toml", "--task", "reverse", "--no-progress"]
    assert main([*argv, "--set", "task.train_size=200", "--no-test"]) == 0, capsys.readouterr()
    assert (here / "runs" / "bom" / "checkpoints").is_dir()


# -- a data size beyond the memory ----------------------------------------------------------
def test_a_data_size_beyond_the_memory_is_named_before_anything_runs(here, refused, monkeypatch):
    """``task.train_size=2e7`` strings need about 14 GB: with 2 GB available it is
    refused at once, naming the data size, not the micro-batch."""
    monkeypatch.setattr(memory, "available_memory", lambda: 2 * 2**30)
    line = refused(
        ["train", "--config", "reverse", "--set", "task.train_size=20000000", "--steps", "1"],
        "generated strings",
        "lower task.train_size",
    )
    assert "max_tokens" not in line and not list(here.iterdir())


def test_an_address_space_limit_counts_as_memory():
    """``ulimit -v`` (RLIMIT_AS) bounds what a process can allocate: it is counted."""
    resource = pytest.importorskip("resource")
    code = (
        "import resource; from scratchformer.engine.memory import available_memory; "
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); "
        "print(available_memory())"
    )
    import subprocess

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert 0 < int(p.stdout) < 3 << 30
    assert resource  # the module exists here: the limit is POSIX


# -- gradcheck ------------------------------------------------------------------------------
def test_a_float32_gradcheck_says_why_it_cannot_pass(capsys):
    argv = ["gradcheck", "--dtype", "float32", "--directions", "1", "--norm", "pre"]
    assert main([*argv, "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith("gradcheck: FAILED")
    why = [line for line in out.splitlines() if "cannot resolve" in line]
    assert len(why) == 1 and why[0].startswith("float32 cannot resolve these gradients to --tol")
    assert "prove them in float64 (the default)" in why[0]
    # and before the check, the rounding floor at its step (far above the tolerance)
    assert "note: --tol 1e-06 is below what central differences in float32 resolve" in out


@pytest.mark.parametrize("h", ["-1e-3", "-0.001", "1e300", "0", "2"])
def test_a_step_out_of_range_is_refused_naming_the_range(refused, h):
    line = refused(["gradcheck", "--h", h], "argument --h: must be a finite number > 0 and <= 1")
    assert "expected" not in line


def test_a_negative_number_for_a_flag_that_takes_one_says_how(refused, tiny_checkpoint):
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--max-len-b", "-1e1"]
    refused(argv, "argument --max-len-b: for a negative number, write --max-len-b=-1e1")


# -- a checkpoint whose weights overflow ----------------------------------------------------
@pytest.mark.parametrize("search", ["beam", "greedy"])
def test_a_checkpoint_whose_weights_overflow_is_named(here, refused, tiny_checkpoint, search):
    arrays = dict(np.load(tiny_checkpoint, allow_pickle=False))
    for k, v in arrays.items():
        if k.startswith("model/") and v.dtype.kind == "f":
            arrays[k] = v * np.float32(1e30)
    np.savez(here / "huge.npz", **arrays)
    (here / "src.txt").write_text("abc\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", "huge.npz", "--input", "src.txt"]
    line = refused(
        argv + (["--greedy"] if search == "greedy" else []),
        "the model's next-token scores are not numbers (NaN)",
        "its largest weight is 1.",
    )
    assert "min_len" not in line and "RuntimeWarning" not in line


# -- an output over a data set's split ------------------------------------------------------
@pytest.mark.parametrize("command", ["evaluate", "translate"])
def test_an_output_over_a_data_sets_split_is_named_as_such(here, refused, tiny_checkpoint, command):
    data = _translation_data(here / "data")
    before = (data / "train.tsv").read_bytes()
    argv = ["--checkpoint", str(tiny_checkpoint), "--output", str(data / "train.tsv"), "--greedy"]
    if command == "evaluate":
        argv += ["--data-dir", str(data)]
    else:
        argv += ["--input", str(data / "dev.tsv")]
    refused([command, *argv], "is the train split of the data set in", "--overwrite")
    assert (data / "train.tsv").read_bytes() == before
