"""Faults around the run directory: one run writes it at a time, and a run killed while
holding it does not lock it forever.

A second training on a directory in use is refused in one line naming the holder; a
holder killed with ``kill -9`` leaves its name in ``.lock`` but not the lock (the
operating system drops it), and the next run takes over, saying whose it was.
"""

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from task_data import TASK_NAMES, TINY_RUN, run_config

from scratchformer.app.checkpoint import list_checkpoints, load_checkpoint
from scratchformer.app.cli import main as cli_main
from scratchformer.app.train import ConfigError, TrainConfig, Trainer, train
from scratchformer.app.train.rundir import LOCK_NAME, RunLock

HOLD = (
    "import sys, time\n"
    "from scratchformer.app.train.rundir import RunLock\n"
    "lock = RunLock(sys.argv[1]).acquire()\n"
    "print('held', flush=True)\n"
    "time.sleep(60)\n"
)


def _holder(run_dir):
    """A process that takes the run directory's lock and keeps it (until killed)."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held"
    return p


def _train(run_dir, *extra):
    return cli_main(["train", *TINY_RUN, "--run-dir", str(run_dir), "--steps", "2", *extra])


def test_a_second_run_on_a_directory_in_use_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    holder = _holder(run)
    try:
        assert _train(run) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert "in use by another training run" in err[0]
        assert f"pid {holder.pid}" in err[0]
        assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing written
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_killed_run_is_taken_over_naming_it(tmp_path, capsys):
    run = tmp_path / "run"
    holder = _holder(run)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert f"pid {holder.pid}" in (run / LOCK_NAME).read_text()  # its name stayed
    assert _train(run, "--no-test") == 0
    out = capsys.readouterr().out
    assert "ended without releasing it" in out and f"pid {holder.pid}" in out
    assert (run / LOCK_NAME).read_text() == ""  # released at the end of the run


@pytest.mark.parametrize("shape", ["symlink", "hard link", "directory", "dangling symlink"])
def test_a_lock_that_is_not_a_plain_file_is_refused_and_never_written(tmp_path, capsys, shape):
    """The lock's holder is written into the lock file in place: a link at its name
    would carry the write (and the truncation at release) to another file, which the
    run must never touch; a directory there is named as what it is."""
    run, precious = tmp_path / "run", tmp_path / "precious.txt"
    run.mkdir()
    precious.write_text("the user's own\n")
    lock = run / LOCK_NAME
    if shape == "symlink":
        lock.symlink_to(precious)
    elif shape == "hard link":
        os.link(precious, lock)
    elif shape == "directory":
        lock.mkdir()
    else:
        lock.symlink_to(tmp_path / "made-by-the-run")
    assert _train(run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{lock} is a" in err[0] and "lock file" in err[0], err
    assert precious.read_text() == "the user's own\n"
    assert not (tmp_path / "made-by-the-run").exists()
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing else written


@pytest.mark.slow
def test_two_real_trainings_on_one_directory(tmp_path):
    """A training process holds the directory while it trains; a second one started
    meanwhile is refused and writes nothing; the first finishes untouched."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "scratchformer", "train", *TINY_RUN, "--run-dir", str(run)]
    first = subprocess.Popen(
        [*cmd, "--steps", "400", "--checkpoint-every", "100", "--no-test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run / LOCK_NAME).exists() or not (run / LOCK_NAME).read_text():
            assert first.poll() is None and time.monotonic() < deadline, "first run never started"
            time.sleep(0.05)
        second = subprocess.run([*cmd, "--steps", "2"], capture_output=True, text=True)
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by another training run (pid {first.pid}" in lines[0]
        assert "Traceback" not in second.stderr
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    assert "done: step 400" in out


def test_release_is_idempotent_and_frees_the_directory(tmp_path):
    lock = RunLock(tmp_path).acquire()
    with pytest.raises(Exception, match="in use by another training run"):
        RunLock(tmp_path).acquire()
    lock.release()
    lock.release()
    RunLock(tmp_path).acquire().release()


# -- helpers ---------------------------------------------------------------------------------
def _one_line(capsys, code, *words) -> str:
    """The run was refused: exit code 2, one stderr line holding ``words``, no traceback."""
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _files(d) -> dict:
    """Every file under ``d`` with its bytes (the lock aside: a refused run may take it)."""
    return {
        str(p.relative_to(d)): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def _put(run, files: dict) -> None:
    for name, data in files.items():
        p = run / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def _steps(run) -> list:
    return [s for s, _ in list_checkpoints(run / "checkpoints")]


TEMP = ".checkpoint_4.npz.0123456789ab.tmp"  # a killed save's name for checkpoint_4.npz
#: a run's config.json (its sections), as an earlier run leaves it
CONFIG = json.dumps(
    {k: {} for k in ("task", "model", "optim", "train")} | {"name": "r", "seed": 0}
).encode()


# -- a fresh run never mixes with an earlier one ---------------------------------------------
@pytest.mark.parametrize(
    "earlier, what",
    [
        ({"checkpoints/averaged.npz": b"avg"}, "(averaged.npz) and no checkpoint to resume"),
        ({"metrics.jsonl": b'{"kind": "train", "step": 1}\n'}, "(metrics.jsonl) and no checkpoint"),
        ({"config.json": CONFIG}, "(config.json) and no checkpoint to resume"),
        ({"checkpoints/checkpoint_4.npz": b"ck"}, "(checkpoints up to step 4): pass --resume"),
        (
            {f"checkpoints/checkpoint_{s}.npz": b"ck" for s in (2, 10, 9)},
            "(checkpoints up to step 10): pass --resume",
        ),
    ],
    ids=["averaged-only", "metrics-only", "config-only", "one-checkpoint", "checkpoints"],
)
def test_a_fresh_run_refuses_a_directory_with_an_earlier_run(tmp_path, capsys, earlier, what):
    run = tmp_path / "run"
    _put(run, {**earlier, "notes.txt": b"mine", f"checkpoints/{TEMP}": b"half"})
    before = _files(run)
    _one_line(capsys, _train(run), f"{run} holds an earlier run {what}", "--overwrite")
    assert _files(run) == before  # nothing deleted, the temporary file neither


def test_a_refused_trainer_lets_the_directory_go_at_once(tmp_path):
    """A run refused after taking the lock releases it, though its exception (and so the
    half-made trainer) is kept, as a notebook keeps the last one."""
    cfg = TrainConfig.from_dict(run_config("reverse", tmp_path))
    train(cfg, progress=False, echo=lambda *a: None, final_eval=False)
    with pytest.raises(ConfigError, match="holds an earlier run") as kept:
        Trainer(cfg, progress=False, echo=lambda *a: None)
    Trainer(cfg, overwrite=True, progress=False, echo=lambda *a: None).run(final_eval=False)
    assert kept.value is not None and _steps(tmp_path / "run") == [3, 6]


# -- --overwrite deletes the run's own files and nothing else --------------------------------
FOREIGN = [
    "notes.txt",
    "checkpoints/my_best.npz",
    "sub/dir/file.txt",
    "checkpoints/checkpoint_7.npz.bak",
    "checkpoints/checkpoint_x.npz",
    "checkpoints/.checkpoint_3.npz.tmp",  # not the temporary name of a save: no hex part
    "checkpoints/.averaged.npz.0123456789AB.tmp",  # upper-case hex: not ours
    f"{TEMP}",  # a checkpoint's temporary name, but outside checkpoints/
    "metrics.jsonl.old",
    ".config.json.tmp",
]


@pytest.mark.parametrize("name", FOREIGN)
def test_overwrite_keeps_files_the_run_did_not_write(tmp_path, capsys, name):
    run = tmp_path / "run"
    assert _train(run, "--steps", "4", "--checkpoint-every", "2", "--no-test") == 0
    _put(run, {name: b"the user's own bytes\n"})
    assert _train(run, "--overwrite", "--no-test") == 0
    assert (run / name).read_bytes() == b"the user's own bytes\n"
    assert _steps(run) == [2]  # the earlier run's checkpoints 2 and 4 went, step 2 is new
    assert "temporary file" not in capsys.readouterr().out


def test_overwrite_deletes_exactly_the_earlier_runs_files(tmp_path, capsys):
    run = tmp_path / "run"
    _put(run, {"config.json": CONFIG, "checkpoints/checkpoint_9.npz": b"ck", "keep/me": b"x"})
    (run / "empty-dir").mkdir()
    assert _train(run, "--overwrite", "--no-test") == 0
    assert sorted(p.name for p in run.iterdir()) == sorted(
        [LOCK_NAME, "checkpoints", "config.json", "empty-dir", "keep", "metrics.jsonl"]
    )
    assert _steps(run) == [2] and (run / "keep/me").read_bytes() == b"x"
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 2


# -- temporary files of killed saves ---------------------------------------------------------
ORPHANS = [
    f"checkpoints/{TEMP}",
    "checkpoints/.checkpoint_12.npz.ffffffffffff.tmp",
    "checkpoints/.averaged.npz.abcdef012345.tmp",
    ".metrics.jsonl.0123456789ab.tmp",
    ".config.json.0123456789ab.tmp",
]


@pytest.mark.parametrize("name", ORPHANS)
@pytest.mark.parametrize("how", ["fresh", "resume"])
def test_a_killed_writes_temporary_file_is_removed_when_the_next_run_starts(
    tmp_path, capsys, name, how
):
    run = tmp_path / "run"
    if how == "resume":
        assert _train(run, "--no-test") == 0
    _put(run, {name: b"half a checkpoint", "checkpoints/mine.tmp": b"x"})
    extra = ["--resume", "--steps", "3"] if how == "resume" else []
    assert _train(run, "--no-test", *extra) == 0
    out = capsys.readouterr().out
    assert f"note: removed 1 temporary file left by an interrupted run in {run}" in out
    assert not (run / name).exists() and (run / "checkpoints/mine.tmp").exists()


def test_several_temporary_files_are_counted(tmp_path, capsys):
    run = tmp_path / "run"
    _put(run, {name: b"" for name in ORPHANS})
    assert _train(run, "--no-test") == 0
    assert f"note: removed {len(ORPHANS)} temporary files left by" in capsys.readouterr().out
    assert not any((run / name).exists() for name in ORPHANS)


NEAR_MISSES = [
    ".checkpoint_4.npz.0123456789a.tmp",  # 11 hex digits
    ".checkpoint_4.npz.0123456789abc.tmp",  # 13
    "checkpoint_4.npz.0123456789ab.tmp",  # no leading dot
    ".checkpoint_4.npz.0123456789ab.tmp.keep",
    ".my_best.npz.0123456789ab.tmp",
    ".checkpoint_.npz.0123456789ab.tmp",
]


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_only_the_exact_temporary_names_are_removed(tmp_path, capsys, name):
    run = tmp_path / "run"
    _put(run, {f"checkpoints/{name}": b"not ours"})
    assert _train(run, "--no-test") == 0
    assert (run / "checkpoints" / name).read_bytes() == b"not ours"
    assert "temporary file" not in capsys.readouterr().out


def test_a_temporary_file_named_like_ours_but_a_directory_stays(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / TEMP).mkdir(parents=True)
    assert _train(run, "--no-test") == 0
    assert (run / "checkpoints" / TEMP).is_dir()


@pytest.mark.parametrize("extra", [[], ["--overwrite"], ["--resume"]])
def test_a_live_runs_temporary_file_is_never_touched(tmp_path, capsys, extra):
    """While another process holds the directory (a save of its own may be under way),
    a second run is refused before it looks at any file."""
    run = tmp_path / "run"
    assert _train(run, "--no-test") == 0
    capsys.readouterr()
    holder = _holder(run)
    try:
        _put(run, {f"checkpoints/{TEMP}": b"being written"})
        before = _files(run)
        _one_line(capsys, _train(run, *extra), "in use by another training run")
        assert _files(run) == before
    finally:
        holder.kill()
        holder.wait()


# -- directories a run cannot use ------------------------------------------------------------
def test_a_run_directory_that_is_a_file(tmp_path, capsys):
    run = tmp_path / "run"
    run.write_text("a file\n")
    _one_line(capsys, _train(run), f"the run directory {run} is a file, not a directory")
    assert run.read_text() == "a file\n"


def test_a_run_directory_under_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("a file\n")
    run = tmp_path / "f" / "run"
    _one_line(capsys, _train(run), f"cannot make the run directory {run}", "is a file")
    assert (tmp_path / "f").read_text() == "a file\n"


def test_a_run_directory_whose_parents_do_not_exist_is_made(tmp_path):
    run = tmp_path / "a" / "b" / "c" / "run"
    assert _train(run, "--no-test") == 0
    assert _steps(run) == [2] and (run / "config.json").is_file()


def test_a_read_only_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o555)
    try:
        try:  # root writes anyway: nothing to test there
            (run / "probe").touch()
        except PermissionError:
            pass
        else:
            pytest.skip("this user writes in read-only directories (root)")
        _one_line(capsys, _train(run), f"cannot write in the run directory {run}", "permission")
        assert list(run.iterdir()) == []
    finally:
        run.chmod(0o755)


@pytest.mark.parametrize(
    "error, words",
    [
        (PermissionError(errno.EACCES, "Permission denied"), "(permission denied)"),
        (OSError(errno.EROFS, "Read-only file system"), "(read-only file system)"),
        (OSError(errno.ENOSPC, "No space left on device"), "(no space left on device)"),
    ],
    ids=["permission", "read-only-file-system", "disk-full"],
)
def test_a_run_directory_that_cannot_be_written(tmp_path, capsys, monkeypatch, error, words):
    """Whatever keeps the run from writing its directory, one line says so (the operating
    system's refusal, simulated where the tests run as root)."""
    run = tmp_path / "run"
    real_open = os.open

    def refusing_open(path, *a, **k):
        if str(path).startswith(str(run)):
            raise error
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", refusing_open)
    _one_line(capsys, _train(run), str(run), words, "another --run-dir or --name")


def test_a_directory_not_writable_though_its_lock_file_is(tmp_path, capsys, monkeypatch):
    """An earlier run left a writable .lock in a directory since made read-only: refused
    before anything is written (simulated: the tests may run as root)."""
    run = tmp_path / "run"
    assert _train(run, "--no-test") == 0
    before = _files(run)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: p != run and real_access(p, mode))
    _one_line(capsys, _train(run, "--overwrite"), f"cannot write in the run directory {run}")
    assert _files(run) == before


# -- --resume of nothing ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "files",
    [None, {}, {"config.json": CONFIG, "metrics.jsonl": b""}],
    ids=["no-dir", "empty", "no-checkpoints"],
)
def test_resume_with_no_checkpoint(tmp_path, capsys, files):
    run = tmp_path / "run"
    if files is not None:
        _put(run, files)
        (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    _one_line(capsys, _train(run, "--resume"), "nothing to resume: no checkpoints in")
    assert not run.exists() if files is None else _files(run) == files


@pytest.mark.parametrize(
    "path, words",
    [
        ("path/that/does/not/exist.npz", "no checkpoint file at path/that/does/not/exist.npz"),
        (".", "checkpoint file"),  # "no checkpoint file at", or "not a checkpoint file"
        ("notes.txt", "notes.txt is not a checkpoint"),
    ],
    ids=["missing", "a-directory", "not-a-checkpoint"],
)
def test_resume_from_a_path_that_is_not_a_checkpoint(tmp_path, capsys, monkeypatch, path, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    _one_line(capsys, _train(tmp_path / "run", "--resume", path), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# -- resuming from an older checkpoint -------------------------------------------------------
def test_resume_from_an_older_checkpoint_is_refused_while_later_ones_exist(tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(run, "--steps", "4", "--checkpoint-every", "2", "--no-test") == 0
    capsys.readouterr()
    before = _files(run)
    old = run / "checkpoints/checkpoint_2.npz"
    _one_line(capsys, _train(run, "--steps", "4", "--resume", str(old)), "checkpoint_4.npz")
    assert _files(run) == before


def test_resume_from_an_older_checkpoint_with_overwrite_replays_the_same_steps(tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(run, "--steps", "4", "--checkpoint-every", "2", "--no-test") == 0
    first = _files(run)
    old = run / "checkpoints/checkpoint_2.npz"
    argv = ["--steps", "4", "--resume", str(old), "--overwrite", "--no-test"]
    assert _train(run, *argv) == 0
    assert "resuming" in capsys.readouterr().out
    assert _steps(run) == [2, 4]
    again = load_checkpoint(run / "checkpoints/checkpoint_4.npz")
    with np.load(io.BytesIO(first["checkpoints/checkpoint_4.npz"])) as z:
        for k, v in again.model.state_dict().items():
            assert np.array_equal(z[f"model/{k}"], v), k


# -- keep_checkpoints, for every task --------------------------------------------------------
@pytest.mark.parametrize("task", TASK_NAMES)
@pytest.mark.parametrize(
    "keep, average, kept",
    [(3, 2, [6, 7, 8]), (3, 3, [6, 7, 8]), (0, 2, list(range(1, 9)))],
    ids=["keep-3", "keep-3-average-3", "keep-all"],
)
def test_every_task_keeps_its_newest_checkpoints(tmp_path, task, keep, average, kept):
    """``keep_checkpoints`` newest checkpoints stay (all with 0); keeping fewer than the
    ``average_last`` the final average reads is refused (tests/faults/test_config.py)."""
    if task == "translate":
        pytest.importorskip("sentencepiece")
    d = run_config(task, tmp_path, steps=8, checkpoint_every=1, eval_every=0, test=False)
    d["train"].update(keep_checkpoints=keep, average_last=average)
    train(TrainConfig.from_dict(d), progress=False, echo=lambda *a: None)
    assert _steps(tmp_path / "run") == kept
    assert (tmp_path / "run/checkpoints/averaged.npz").is_file()


# -- the metrics log across a resume ---------------------------------------------------------
def test_a_record_spanning_a_checkpoint_averages_the_same_steps_after_a_resume(tmp_path):
    """Records every 3 steps, checkpoints every 5: the record of step 6 after resuming at
    step 5 averages steps 4-6, as in a run that never stopped."""

    def cfg(root, steps):
        d = run_config("reverse", root, steps=steps, log_every=3, checkpoint_every=5)
        return TrainConfig.from_dict({**d, "run_dir": str(root / "run")})

    def records(run):
        recs = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        timing = ("tokens_per_s", "elapsed")
        return [{k: v for k, v in r.items() if k not in timing} for r in recs]

    def quiet(*a):
        pass

    train(cfg(tmp_path / "a", 9), progress=False, echo=quiet, final_eval=False)
    b = cfg(tmp_path / "b", 9)
    train(b, progress=False, echo=quiet, final_eval=False)
    # as if killed after the checkpoint of step 5: its steps 6-9 are done again
    at_5 = tmp_path / "b/run/checkpoints/checkpoint_5.npz"
    Trainer(b, resume=at_5, overwrite=True, progress=False, echo=quiet).run(final_eval=False)
    assert [r["step"] for r in records(tmp_path / "b/run") if r["kind"] == "train"] == [3, 6, 9]
    assert records(tmp_path / "b/run") == records(tmp_path / "a/run")


# -- a run name is a name; a directory holds one run -----------------------------------------
def _checksums(d) -> dict:
    return {str(p): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "name", ["../escape", "/abs/path", ".", "..", "a/b", "a\\b", " padded", "x" * 256]
)
def test_a_run_name_is_one_folder_name(tmp_path, capsys, monkeypatch, name):
    """Refused in one line before anything is written, here or outside runs/."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    argv = ["train", *TINY_RUN, "--name", name, "--steps", "2"]
    _one_line(capsys, cli_main(argv), f"name {name!r} (from --name) is not a run name")
    assert list(tmp_path.rglob("*")) == [project]


def test_a_name_from_a_config_file_is_checked_too(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text('name = "../up"\n')
    _one_line(capsys, cli_main(["train", "--config", "c.toml"]), "name '../up' (from c.toml)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_folder_whose_files_no_run_wrote_is_refused(tmp_path, capsys, overwrite):
    """A project folder with a config.json and metrics.jsonl of its own: a run there
    (--run-dir, as --name .. once did) would write over them; --overwrite changes
    nothing."""
    project = tmp_path / "project"
    _put(project, {"config.json": b'{"editor": "vim"}\n', "metrics.jsonl": b"not ours\n"})
    before = _checksums(project)
    line = _one_line(capsys, _train(project, *overwrite), f"{project} holds config.json")
    assert "not a scratchformer run's file" in line
    assert _checksums(project) == before and not (project / LOCK_NAME).exists()


def _two_runs(tmp_path):
    """Two runs of the reverse task, with other seeds, side by side."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert _train(a, "--steps", "4", "--checkpoint-every", "2", "--no-test") == 0
    assert _train(b, "--steps", "4", "--checkpoint-every", "2", "--no-test", "--seed", "7") == 0
    return a, b


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_resuming_another_runs_checkpoint_into_a_run_directory_is_refused(
    tmp_path, capsys, overwrite
):
    """b's checkpoint of step 2 into a (which has later checkpoints of its own): the two
    runs would mix, and --overwrite would delete a's; refused either way, naming what
    differs, every file of both runs unchanged."""
    a, b = _two_runs(tmp_path)
    capsys.readouterr()
    before = _checksums(tmp_path)
    other = b / "checkpoints" / "checkpoint_2.npz"
    argv = ["--resume", str(other), "--steps", "6", *overwrite]
    line = _one_line(capsys, _train(a, *argv), f"{a} holds the files of another run")
    assert "seed" in line and "no flag deletes another run's files" in line
    assert _checksums(tmp_path) == before


def test_a_runs_checkpoint_resumes_into_a_new_directory(tmp_path, capsys):
    """Continuing a copy of a run elsewhere is not mixing: allowed."""
    a, _ = _two_runs(tmp_path)
    new = tmp_path / "c"
    argv = ["--resume", str(a / "checkpoints" / "checkpoint_2.npz"), "--steps", "4", "--no-test"]
    assert _train(new, *argv) == 0, capsys.readouterr().err
    assert _steps(new) == [4]
