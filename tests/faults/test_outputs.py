"""Outputs that would destroy inputs: no command writes over a file it reads, however the
file is named (the same path, a symbolic or a hard link, standard output redirected to
it), nor over a run's files or a file of another kind without ``--overwrite``.

Each refusal is one line, and every file of the test's folder and of the run it uses is
byte for byte what it was (SHA-256 of each, before and after).
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scratchformer.app.checkpoint import load_checkpoint


def checksums(*folders) -> dict:
    """SHA-256 of every file under ``folders``."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for d in folders
        for p in sorted(Path(d).rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture
def run(reverse_model, tmp_path):
    """A copy of a trained run (config.json, metrics.jsonl, checkpoints/) and a source
    file, in this test's folder."""
    here = tmp_path / "run"
    shutil.copytree(Path(reverse_model[0]).parent.parent, here)
    src = tmp_path / "src.txt"
    src.write_text("abc\ncab\n", encoding="utf-8")
    return here


def translate(run, *argv):
    ckpt = run / "checkpoints" / "final.npz"
    return ["translate", "--checkpoint", str(ckpt), "--input", str(run.parent / "src.txt"), *argv]


def test_translate_never_writes_over_its_checkpoint(run, refused):
    ckpt = run / "checkpoints" / "final.npz"
    before = checksums(run.parent)
    refused(translate(run, "--output", str(ckpt)), f"--output {ckpt} is the --checkpoint file")
    refused(
        translate(run, "--output", str(ckpt), "--overwrite"), "is the --checkpoint file"
    )  # --overwrite never names an input
    assert checksums(run.parent) == before


@pytest.mark.parametrize("how", ["same-path", "symlink", "hard-link"])
def test_translate_never_writes_over_its_input(run, refused, how):
    src = run.parent / "src.txt"
    out = {"same-path": src, "symlink": run.parent / "link.txt", "hard-link": run.parent / "h"}[how]
    if how == "symlink":
        out.symlink_to(src)
    elif how == "hard-link":
        os.link(src, out)
    before = checksums(run.parent)
    refused(translate(run, "--output", str(out)), f"--output {out} is the --input file")
    assert checksums(run.parent) == before


def test_standard_output_redirected_to_the_input_is_refused(run):
    """``translate --input src.txt >> src.txt``: the output would grow the file it reads."""
    src = run.parent / "src.txt"
    before = checksums(run.parent)
    argv = [sys.executable, "-m", "scratchformer", *translate(run), "--no-progress"]
    with open(src, "ab") as out:
        p = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [
        f"scratchformer translate: error: standard output is the --input file {src}: the "
        "output would be written into the file it reads; write the output to another file"
    ]
    assert checksums(run.parent) == before


@pytest.mark.parametrize("mode", ["wb", "ab"], ids=["emptied", "appended"])
def test_standard_output_redirected_to_standard_input_is_refused(run, mode):
    """``translate < src.txt >> src.txt`` would read its own output as more input;
    ``> src.txt`` leaves nothing to read (the shell emptied the file): each says which."""
    src = run.parent / "src.txt"
    argv = [sys.executable, "-m", "scratchformer", "translate", "--no-progress"]
    argv += ["--checkpoint", str(run / "checkpoints" / "final.npz")]
    before = checksums(run)
    with open(src, "rb") as source, open(src, mode) as out:
        p = subprocess.run(argv, stdin=source, stdout=out, stderr=subprocess.PIPE, text=True)
    why = {
        "wb": "the shell emptied it before this command started",
        "ab": "the output would be written into the file it reads",
    }[mode]
    assert p.returncode == 2 and p.stderr.splitlines() == [
        f"scratchformer translate: error: standard output is standard input: {why}; write the "
        "output to another file"
    ]
    assert src.read_text(encoding="utf-8") == ("" if mode == "wb" else "abc\ncab\n")
    assert checksums(run) == before


def test_an_output_that_is_no_regular_file_is_never_taken_for_an_input(run):
    """/dev/null (and a terminal) can be standard input and output, or --input and
    --output, at once: writing it destroys nothing, so nothing is refused."""
    ckpt = str(run / "checkpoints" / "final.npz")
    argv = [sys.executable, "-m", "scratchformer", "translate", "--checkpoint", ckpt]
    for extra, stdin, stdout in [
        (["--input", os.devnull], subprocess.DEVNULL, subprocess.DEVNULL),
        (["--output", os.devnull], subprocess.DEVNULL, subprocess.PIPE),
        (["--input", os.devnull, "--output", os.devnull], None, subprocess.PIPE),
    ]:
        p = subprocess.run([*argv, *extra, "--no-progress"], stdin=stdin, stdout=stdout,
                           stderr=subprocess.PIPE, text=True)
        assert p.returncode == 0, (extra, p.stderr)
        assert "translated 0 sentences" in p.stderr


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "checkpoints/checkpoint_60.npz"])
def test_translate_writes_over_a_run_file_only_with_overwrite(run, refused, capsys, name):
    target = run / name
    before = checksums(run.parent)
    what = "an .npz name is a checkpoint's" if name.endswith(".npz") else f"of the run in {run}"
    refused(translate(run, "--output", str(target)), what)
    assert checksums(run.parent) == before
    if not name.endswith(".npz"):
        from scratchformer.app.cli import main

        assert main([*translate(run, "--output", str(target), "--overwrite")]) == 0
        assert target.read_text(encoding="utf-8").count("\n") == 2  # the user named it


def test_a_text_output_is_never_named_like_a_checkpoint(run, refused):
    out = run.parent / "new.npz"
    refused(translate(run, "--output", str(out)), "an .npz name is a checkpoint's")
    assert not out.exists()


def test_a_text_output_never_replaces_a_binary_file_unasked(run, refused):
    """A checkpoint kept under another name is still a checkpoint (its first bytes)."""
    kept = run.parent / "weights.bin"
    shutil.copy(run / "checkpoints" / "averaged.npz", kept)
    before = checksums(run.parent)
    refused(translate(run, "--output", str(kept)), "exists (not written by this output)")
    assert checksums(run.parent) == before


def test_evaluate_never_writes_over_its_test_file_or_checkpoint(run, pairs_dir, refused):
    ckpt = run / "checkpoints" / "averaged.npz"
    data = run.parent / "data"
    shutil.copytree(pairs_dir, data)
    before = checksums(run.parent)
    argv = ["evaluate", "--checkpoint", str(ckpt), "--data-dir", str(data), "--greedy"]
    refused([*argv, "--output", str(data / "test.tsv")], "is the --split test file")
    refused([*argv, "--split", "dev", "--output", str(data / "dev.tsv")], "--split dev file")
    refused([*argv, "--output", str(ckpt)], "is the --checkpoint file")
    assert checksums(run.parent) == before


def test_average_never_writes_over_a_file_of_a_run(run, refused):
    ckpts = sorted((run / "checkpoints").glob("checkpoint_*.npz"))
    before = checksums(run.parent)
    for name in ("config.json", "metrics.jsonl"):
        out = run / name
        refused(["average", *map(str, ckpts), "-o", str(out)], "should end in .npz")
    refused(
        ["average", str(run / "checkpoints"), "--last", "1"], "is the averaged model of the run in"
    )
    assert checksums(run.parent) == before


def test_average_replaces_a_runs_average_only_with_overwrite(run, refused, capsys):
    from scratchformer.app.cli import main

    assert main(["average", str(run / "checkpoints"), "--last", "1", "--overwrite"]) == 0
    assert "averaged_from" in load_checkpoint(run / "checkpoints" / "averaged.npz").meta


@pytest.mark.parametrize("how", ["symlink", "hard-link"])
def test_average_compares_files_not_names(run, refused, how):
    """The same file reached another way (a link; a bind mount is the same to stat) is
    one of the inputs, though its path differs."""
    ckpts = sorted((run / "checkpoints").glob("checkpoint_*.npz"))
    other = run.parent / "other.npz"
    (other.symlink_to if how == "symlink" else lambda p: os.link(p, other))(ckpts[0])
    before = checksums(run.parent)
    refused(["average", *map(str, ckpts), "-o", str(other)], "is the input checkpoint file")
    assert checksums(run.parent) == before


def test_average_refuses_an_output_of_another_kind(run, refused):
    ckpts = sorted((run / "checkpoints").glob("checkpoint_*.npz"))
    notes = run.parent / "notes.npz"
    notes.write_text("my notes, named oddly\n")
    before = checksums(run.parent)
    refused(["average", *map(str, ckpts), "-o", str(notes)], "exists (not written by this output)")
    refused(["average", *map(str, ckpts), "-o", str(run.parent / "avg.txt")], "should end in .npz")
    assert checksums(run.parent) == before


def test_a_runs_checkpoints_folder_reached_another_way_is_still_the_runs(run, refused):
    """The folder under another name (a link here; a bind mount is the same): what it
    holds says it is a run's checkpoints, so its averaged.npz is the run's."""
    ckpts = sorted((run / "checkpoints").glob("checkpoint_*.npz"))
    alias = run.parent / "alias"
    alias.symlink_to(run / "checkpoints", target_is_directory=True)
    before = checksums(run.parent)
    out = alias / "averaged.npz"
    refused(["average", *map(str, ckpts), "-o", str(out)], "is the averaged model of the run")
    assert checksums(run.parent) == before
