"""The one writer (scratchformer/app/writer/): no other module of the package writes a file,
and what it writes never destroys another.

Statically: no module outside writer/ opens a file for writing, writes a path
(``Path.write_*``), saves arrays (``np.save*``) or a figure (``savefig``), copies
(``shutil.copy*``) or renames (``os.replace``, ``os.rename``, ``Path.rename``) a file.
A planted direct write is caught. Then the writer's own rules, one by one.
"""

import ast
import json
import os
from pathlib import Path

import pytest

import scratchformer
from scratchformer.app import writer

PACKAGE = Path(scratchformer.__file__).resolve().parent
WRITER = PACKAGE / "app" / "writer"  # the writer package: its writing, ledger and plan
#: calls that write, whatever their arguments
ALWAYS = {"write_text", "write_bytes", "savez", "savez_compressed", "save", "savetxt",
          "savefig", "copy", "copy2", "copyfile", "copyfileobj", "copytree", "replace",
          "rename", "move", "link", "symlink", "truncate"}
#: modules whose ``replace``/``copy``... mean a file (``str.replace`` does not)
FILE_MODULES = {"os", "shutil", "np", "numpy", "Path"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _mode(call: ast.Call) -> str:
    """The mode string of an ``open``/``fdopen`` call ("r" when absent or not a literal)."""
    args = call.args[1:2] + [k.value for k in call.keywords if k.arg == "mode"]
    for a in args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            return a.value
    return "r"


def writes(path: Path) -> list[str]:
    """``line: what`` for every call in the file that writes a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        owner = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
        if owner == "writer":  # through the writer: what this check asks for
            continue
        if name in ("open", "fdopen") and owner != "os" and set(_mode(node)) & set("wax+"):
            found.append(f"{node.lineno}: open(..., {_mode(node)!r})")
        elif name == "open" and owner == "os":
            flags = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if flags & WRITE_FLAGS:
                found.append(
                    f"{node.lineno}: os.open(..., {'|'.join(sorted(flags & WRITE_FLAGS))})"
                )
        elif name in ("write_text", "write_bytes", "savefig", "savez", "savez_compressed"):
            found.append(f"{node.lineno}: {name}()")
        elif name in ALWAYS and owner in FILE_MODULES:
            found.append(f"{node.lineno}: {owner}.{name}()")
    return found


def test_no_module_but_the_writer_writes_a_file():
    found = {
        str(p.relative_to(PACKAGE)): w
        for p in sorted(PACKAGE.rglob("*.py"))
        if WRITER not in p.parents and (w := writes(p))
    }
    assert not found, f"write through scratchformer/app/writer, not directly: {found}"
    assert writes(WRITER / "__init__.py")  # the check sees the writer's own writes


def test_a_planted_direct_write_is_caught(tmp_path):
    planted = tmp_path / "command.py"
    planted.write_text(
        "import os, shutil\n"
        "def run(args):\n"
        "    with open(args.output, 'w') as f:\n"
        "        f.write('x')\n"
        "    open(args.log, mode='a')\n"
        "    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT)\n"
        "    shutil.copy(a, b)\n"
        "    os.replace(a, b)\n"
        "    figure.savefig(args.out)\n"
        "    open(args.input).read()\n"  # reading: fine
        "    'a.b'.replace('.', '/')\n"  # a string's replace: fine
    )
    found = writes(planted)
    assert sorted(int(w.split(":")[0]) for w in found) == [3, 5, 6, 7, 8, 9], found


# -- the writer's rules ---------------------------------------------------------------------
@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_an_output_that_is_an_input_is_refused_by_any_name(tmp_path):
    data = tmp_path / "train.tsv"
    data.write_text("a\tb\n")
    os.link(data, tmp_path / "hard.tsv")
    (tmp_path / "soft.tsv").symlink_to(data)
    plan = writer.Plan("evaluate", [("--split", data)], overwrite=True)
    for name in ("train.tsv", "hard.tsv", "soft.tsv"):
        with pytest.raises(writer.WriteError, match="it would be destroyed while it is read"):
            plan.output(tmp_path / name, "evaluate --output", flag="--output")
    assert data.read_text() == "a\tb\n"


def test_only_the_programs_own_earlier_output_of_the_same_kind_is_replaced(tmp_path):
    out = tmp_path / "hyp.txt"
    plan = writer.Plan("translate")
    writer.write_text(plan.output(out, "translate --output"), "one\n")
    assert writer.written_as(out) == "translate --output"
    writer.write_text(plan.output(out, "translate --output"), "two\n")  # a re-run
    with pytest.raises(writer.WriteError, match=r"written by scratchformer as translate"):
        plan.output(out, "evaluate --output", flag="--output")
    out.write_text("edited by hand\n")  # no longer the program's
    with pytest.raises(writer.WriteError, match="not written by this output.*--overwrite"):
        plan.output(out, "translate --output")
    writer.Plan("translate", overwrite=True).output(out, "translate --output")


def test_a_link_out_of_the_owned_folder_is_never_written_through(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("mine")
    folder = tmp_path / "exercises"
    folder.mkdir()
    (folder / "relu.hints.md").symlink_to(outside)
    with pytest.raises(writer.WriteError, match="leads out of"):
        writer.append_text(folder / "relu.hints.md", "hint", owner=folder)
    with pytest.raises(writer.WriteError, match="leads out of"):
        writer.write_text(folder / "relu.hints.md", "hint", owner=folder)
    assert outside.read_text() == "mine"


def test_an_append_never_reaches_another_name_of_the_file(tmp_path):
    """A log with a hard link elsewhere (a backup made with ``cp -l``) gets a file of its
    own before anything is added: the other name keeps its content."""
    folder = tmp_path / "run"
    folder.mkdir()
    log = folder / "metrics.jsonl"
    log.write_text("one\n")
    backup = tmp_path / "backup.jsonl"
    os.link(log, backup)
    writer.append_text(log, "two\n", owner=folder)
    assert (log.read_text(), backup.read_text()) == ("one\ntwo\n", "one\n")
    assert os.stat(log).st_nlink == 1 and not list(folder.glob(".*.tmp"))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "a.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError), writer.replacing(out) as f:
        f.write("new, half")
        raise RuntimeError("disk full")
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "state"] or sorted(
        p.name for p in tmp_path.iterdir()
    ) == ["a.txt"]


def test_a_stream_is_written_as_it_is_never_read(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so that opening it writes
    try:
        writer.write_text(fifo, "through\n")
        assert os.read(r, 100) == b"through\n"
    finally:
        os.close(r)


def test_a_file_set_is_all_or_nothing_and_a_rerun_with_the_same_content_is_a_no_op(tmp_path):
    paths = {s: tmp_path / f"{s}.tsv" for s in ("train", "dev")}
    with writer.FileSet(paths) as files:
        files["train"].write("a\n")
        files["dev"].write("b\n")
    with (fs := writer.FileSet(paths)) as files:
        files["train"].write("a\n")
        files["dev"].write("b\n")
    assert fs.unchanged and not fs.replaced
    paths["dev"].write_text("edited\n")
    with (
        pytest.raises(writer.WriteError, match="exists with other content"),
        writer.FileSet(paths) as files,
    ):
        files["train"].write("a\n")
        files["dev"].write("b\n")
    assert paths["dev"].read_text() == "edited\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_ledger_is_one_json_file_that_forgets_changed_files(tmp_path):
    out = tmp_path / "x.png"
    writer.write_bytes(out, b"png", role="plot schedule")
    entries = json.loads(writer.ledger_path().read_text())
    assert list(entries.values())[0][0] == "plot schedule"
    out.write_bytes(b"other")
    assert writer.written_as(out) is None


# -- several files as one: a folder renamed into place whole, a manifest written last ------
FOLDER_FILES = ("a.json", "b.bin")


def write_folder(out, a="1", b=b"2", **kw):
    fs = writer.FileSet({n: out / n for n in FOLDER_FILES}, folder=out, binary={"b.bin"}, **kw)
    with fs as files:
        files["a.json"].write(a)
        files["b.bin"].write(b)
    return fs


def contents(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.is_dir() else None


def test_a_folder_is_renamed_into_place_whole_and_only_over_an_earlier_one(tmp_path):
    out = tmp_path / "hf"
    write_folder(out)
    assert contents(out) == {"a.json": b"1", "b.bin": b"2"}
    assert write_folder(out).unchanged and sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    with pytest.raises(writer.WriteError, match="a.json, .*b.bin exist with other content"):
        write_folder(out, "3", b"4")
    write_folder(out, "3", b"4", overwrite=True)
    assert contents(out) == {"a.json": b"3", "b.bin": b"4"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # nothing left beside it
    (out / "notes.txt").write_text("mine")
    with pytest.raises(writer.WriteError, match="holds notes.txt, which is not part of a set"):
        write_folder(out, "5", b"6", overwrite=True)
    assert contents(out)["a.json"] == b"3" and contents(out)["notes.txt"] == b"mine"


def test_a_directory_where_a_file_goes_is_refused_before_anything_is_touched(tmp_path):
    out = tmp_path / "hf"
    (out / "b.bin").mkdir(parents=True)
    with pytest.raises(writer.WriteError, match="b.bin is a directory, where this command"):
        write_folder(out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no new folder beside it
    assert [p.name for p in out.iterdir()] == ["b.bin"] and (out / "b.bin").is_dir()
    paths = {s: tmp_path / "d" / f"{s}.tsv" for s in ("train", "dev")}
    (tmp_path / "d" / "dev.tsv").mkdir(parents=True)
    with pytest.raises(writer.WriteError, match="dev.tsv is a directory"):
        writer.FileSet(paths, overwrite=True)
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["dev.tsv"]


@pytest.mark.parametrize(
    "left, note",
    [
        (("tmp",), "removed .hf.0123456789ab.tmp, the unfinished set"),
        (("new",), "finished it (" + "{out} holds the new set)"),
        (("old",), "restored it (" + "{out} holds the earlier set again)"),
        (("new", "old"), "finished it ("),
    ],
)
def test_the_next_run_puts_back_a_folder_an_interrupted_run_moved_aside(tmp_path, left, note):
    """A run killed between its renames leaves the old folder (``.old``) and the new one
    (``.new``, complete; ``.tmp``, still being built) beside the target; the next run
    puts the complete one back, says which, and removes the rest."""
    out = tmp_path / "hf"
    sets = {"earlier": ("1", b"2"), "new": ("3", b"4"), "tmp": ("5", b"")}
    if "old" not in left and "new" not in left:
        write_folder(out, *sets["earlier"])
    for state in left:
        d = tmp_path / f".hf.0123456789ab.{state}"
        write_folder(d, *sets["earlier" if state == "old" else state])
    notes = []
    write_folder(out, *sets["new"], overwrite=True, echo=notes.append)
    assert any(note.format(out=out) in n for n in notes), notes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    assert contents(out) == {"a.json": b"3", "b.bin": b"4"}


def test_a_recovered_folder_is_the_old_or_the_new_one_never_a_mix(tmp_path):
    out = tmp_path / "hf"
    write_folder(tmp_path / ".hf.0123456789ab.old", "1", b"2")
    notes = []
    with pytest.raises(writer.WriteError, match="exist with other content"):
        write_folder(out, "3", b"4", echo=notes.append)  # restored, then refused
    assert contents(out) == {"a.json": b"1", "b.bin": b"2"} and "restored it" in notes[0]


def data_set(d, train="t\n", dev="d\n", command="scratchformer data pairs x.tsv", **kw):
    paths = {s: d / f"{s}.tsv" for s in ("train", "dev")}
    fs = writer.FileSet(paths, manifest=writer.MANIFEST_NAME, command=command, **kw)
    with fs as files:
        files["train"].write(train)
        files["dev"].write(dev)
    return fs


NAMES = ["train.tsv", "dev.tsv"]


def test_a_data_set_is_whole_by_its_manifest_written_last(tmp_path):
    d = tmp_path / "d"
    data_set(d)
    m = json.loads((d / "manifest.json").read_text())
    assert m["complete"] and m["command"] == "scratchformer data pairs x.tsv"
    assert m["files"]["train.tsv"]["bytes"] == 2 and len(m["files"]["dev.tsv"]["sha256"]) == 64
    assert writer.check_manifest(d, NAMES) == ("", "scratchformer data pairs x.tsv", True, False)
    (d / "dev.tsv").write_text("e\n")  # the same size: the hash tells
    assert "dev.tsv holds other content than it had" in writer.check_manifest(d, NAMES).problem
    (d / "dev.tsv").write_text("longer\n")
    assert "dev.tsv holds 7 bytes, not 2" in writer.check_manifest(d, NAMES).problem
    assert "does not list test.tsv" in writer.check_manifest(d, [*NAMES, "test.tsv"]).problem


def test_an_interrupted_data_set_is_refused_and_the_next_run_replaces_it(tmp_path):
    """Before its first rename a write marks the manifest incomplete: a run killed among
    the renames leaves a set every reader refuses; the next run (no --overwrite needed:
    the files are an interrupted write's) removes its temporary files and replaces it."""
    d = tmp_path / "d"
    data_set(d)
    (d / "manifest.json").write_text(
        json.dumps(
            {"format": "scratchformer file set", "complete": False, "command": "c", "files": {}}
        )
    )
    (d / "dev.tsv").write_text("new dev\n")  # the new dev, the old train: a mix
    (d / ".train.tsv.0123456789ab.tmp").write_text("new train\n")
    got = writer.check_manifest(d, NAMES)
    assert got.incomplete and "was interrupted" in got.problem and got.command == "c"
    notes = []
    data_set(d, "new train\n", "new dev\n", echo=notes.append)
    assert "removed 1 temporary file an interrupted run left" in notes[0]
    assert writer.check_manifest(d, NAMES).problem == ""
    assert sorted(p.name for p in d.iterdir()) == ["dev.tsv", "manifest.json", "train.tsv"]


def test_a_data_set_without_a_manifest_is_read_unless_an_interrupted_write_is_beside_it(tmp_path):
    """A folder made by hand, or by a version before manifests: read as it is; but a
    temporary file of one of its splits is what such a version left when interrupted."""
    d = tmp_path / "d"
    d.mkdir()
    for name in NAMES:
        (d / name).write_text("x\n")
    assert writer.check_manifest(d, NAMES) == ("", "", False, False)
    (d / ".dev.tsv.0123456789ab.tmp").write_text("")
    assert "is the temporary file of a write that was interrupted" in (
        writer.check_manifest(d, NAMES).problem
    )
    data_set(d, "x\n", "x\n")  # the same content: only the manifest is added
    assert writer.check_manifest(d, NAMES).listed and not writer.check_manifest(d, NAMES).problem


def test_a_ctrl_c_while_the_files_are_renamed_waits_until_all_are(tmp_path, monkeypatch):
    import signal

    from scratchformer.app.writer import atomic, fileset

    d = tmp_path / "d"
    data_set(d)
    real = atomic.install

    def install(tmp, path):
        real(tmp, path)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the first rename

    monkeypatch.setattr(fileset, "install", install)
    with pytest.raises(KeyboardInterrupt):
        data_set(d, "new train\n", "new dev\n", overwrite=True)
    assert (d / "dev.tsv").read_text() == "new dev\n" and (
        d / "train.tsv"
    ).read_text() == "new train\n"
    monkeypatch.undo()
    assert writer.check_manifest(d, NAMES).problem == ""
    assert sorted(p.name for p in d.iterdir()) == ["dev.tsv", "manifest.json", "train.tsv"]


# -- the ledger: an edit is seen however its times were set; it never fails a command --------
def test_an_edit_that_keeps_the_size_and_sets_the_time_back_is_seen(tmp_path):
    """``touch -r``: the same size, the modification time set back; the change time (which
    no user sets) and, under 1 MB, the content hash still tell."""
    out = tmp_path / "hyp.txt"
    writer.write_text(out, "abc\n", role="translate --output")
    assert writer.written_as(out) == "translate --output"
    st = out.stat()
    with open(out, "r+") as f:  # the user's edit, in place: same size
        f.write("xyz")
    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert out.stat().st_size == st.st_size and out.stat().st_mtime_ns == st.st_mtime_ns
    assert writer.written_as(out) is None
    with pytest.raises(writer.WriteError, match="exists .*pass --overwrite"):
        writer.Plan("translate").output(out, "translate --output")


def test_an_unwritable_or_full_ledger_never_fails_a_command_after_its_output(tmp_path, monkeypatch):
    """The output is written and the command goes on; the file then counts as no one's
    (an existing output needs --overwrite). A ledger that is not a regular file (here
    /dev/full, which reads as endless zeros) is never read."""
    import errno

    state = tmp_path / "state" / "scratchformer"
    state.mkdir(parents=True)
    (state / "written.json").symlink_to("/dev/full")
    out = tmp_path / "a.txt"
    writer.write_text(out, "a\n", role="plot schedule")
    assert out.read_text() == "a\n" and writer.written_as(out) is None
    (state / "written.json").unlink()

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    writer.write_text(out, "b\n", role="plot schedule")  # remembered
    monkeypatch.setattr(os, "pwrite", full)
    writer.write_text(out, "c\n", role="plot schedule")  # the ledger's disk is full
    monkeypatch.undo()
    assert out.read_text() == "c\n" and writer.written_as(out) is None
