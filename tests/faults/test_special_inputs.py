"""Special inputs read the way they come: a stream (a FIFO, ``/dev/stdin``, a process
substitution) is read once, as it arrives; a command started as several processes that
does not run as several is refused in one line; the empty-output promise holds or the
setting that breaks it is named; a checkpoint is used only by the command that fits its
task, and a resumed run only goes forward from where it is."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from scratchformer.app.cli import main

LINES = ["abc", "cab", "", "jihg"]


def _translate(ckpt, *argv):
    return [sys.executable, "-m", "scratchformer", "translate", "--checkpoint", str(ckpt), *argv]


def _direct(reverse_model, capsys, tmp_path) -> list[str]:
    src = tmp_path / "direct.txt"
    src.write_text("".join(s + "\n" for s in LINES), encoding="utf-8")
    assert main(["translate", "--checkpoint", str(reverse_model[0]), "--input", str(src)]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_fifo_is_read_once_as_it_comes(reverse_model, tmp_path, capsys):
    want = _direct(reverse_model, capsys, tmp_path)
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in LINES))

    writer = threading.Thread(target=feed)
    writer.start()
    p = subprocess.run(
        _translate(reverse_model[0], "--input", str(fifo)), capture_output=True, text=True,
        timeout=120,
    )
    writer.join(timeout=10)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == want and len(want) == len(LINES)


@pytest.mark.parametrize("how", ["dev-stdin", "process-substitution"])
def test_a_stream_named_as_a_file_is_read_once(reverse_model, tmp_path, capsys, how):
    want = _direct(reverse_model, capsys, tmp_path)
    text = "".join(s + "\n" for s in LINES)
    if how == "dev-stdin":
        argv = _translate(reverse_model[0], "--input", "/dev/stdin")
        p = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=120)
    else:
        if shutil.which("bash") is None:
            pytest.skip("process substitution needs bash")
        (tmp_path / "lines.txt").write_text(text, encoding="utf-8")
        cmd = " ".join(f"'{a}'" for a in _translate(reverse_model[0], "--input"))
        script = f"{cmd} <(cat '{tmp_path / 'lines.txt'}')"
        p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == want


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("command", ["translate", "evaluate", "generate", "average", "gradcheck"])
def test_several_processes_are_refused_by_every_command_but_train(
    capsys, monkeypatch, command, rank
):
    """Started by an MPI launcher (its variables set): rank 0 says it once, the others
    end without a word; nothing else runs."""
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_RANK", str(rank))
    assert main([command, *_ARGS[command]]) == 2
    err = capsys.readouterr().err.splitlines()
    if rank == 0:
        assert err == [
            f"scratchformer {command}: error: {command} runs as one process, and 2 were "
            "started (mpiexec -n ...): start it without mpiexec (only train runs as several)"
        ]
    else:
        assert err == []


_ARGS = {
    "translate": ["--checkpoint", "x.npz"],
    "evaluate": ["--checkpoint", "x.npz"],
    "generate": ["--checkpoint", "x.npz"],
    "average": ["a.npz", "b.npz"],
    "gradcheck": [],
}


@pytest.mark.slow
def test_translate_under_mpiexec_is_refused_once(reverse_model, tmp_path, mpi):
    src = tmp_path / "src.txt"
    src.write_text("abc\nde\n", encoding="utf-8")
    argv = [mpi, "-n", "2", *_translate(reverse_model[0], "--input", str(src))]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and p.stdout == ""
    ours = [ln for ln in p.stderr.splitlines() if ln.startswith("scratchformer")]
    assert ours == [
        "scratchformer translate: error: translate runs as one process, and 2 were started "
        "(mpiexec -n ...): start it without mpiexec (only train runs as several)"
    ]


# -- SWORD modules: a damaged one is refused, never read as a shorter Bible -------------------
SWORD = Path("/usr/share/sword")


def _sword_copy(tmp_path, damage):
    """A copy of the installed SWORD folder with the WEB damaged by ``damage(path)`` of
    one of its files; skipped where the WEB is not installed (or pysword is missing)."""
    pytest.importorskip("pysword")
    web = SWORD / "modules" / "texts" / "ztext" / "engWEB2015eb"
    if not web.is_dir():
        pytest.skip("the SWORD module engWEB2015eb is not installed (sword-text-web)")
    copy = tmp_path / "sword"
    shutil.copytree(SWORD, copy)
    damage(copy / "modules" / "texts" / "ztext" / "engWEB2015eb")
    return copy


def _truncate(d):
    f = d / "ot.bzz"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])


def _flip(d):
    f = d / "nt.bzz"
    raw = bytearray(f.read_bytes())
    for i in range(1000, len(raw), 50_000):
        raw[i] ^= 0xFF
    f.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "damage, book",
    [(_truncate, "2Kgs gives 0 verses"), (_flip, "gives")],
    ids=["truncated", "bit-flipped"],
)
@pytest.mark.parametrize("dataset", ["genre", "web-text"])
def test_a_damaged_sword_module_is_refused_naming_the_book(
    tmp_path, monkeypatch, refused, damage, book, dataset
):
    sword = _sword_copy(tmp_path, damage)
    monkeypatch.chdir(tmp_path)
    line = refused(["data", dataset, "--sword-path", str(sword), "--no-progress"], book)
    assert f"SWORD module engWEB2015eb under {sword} is damaged" in line
    assert "where the intact module holds" in line and "--reinstall sword-text-web" in line
    assert not list((tmp_path / "data").rglob("*.tsv")) + list((tmp_path / "data").rglob("*.txt"))


# -- the empty-output promise ------------------------------------------------------------------
def test_tokens_that_write_nothing_never_make_a_blank_translation(monkeypatch):
    """A model that puts the space first and <eos> second at every step (as an
    undertrained BPE model puts a lone word boundary): the searches alone give spaces,
    blank text; translate keeps <eos> out until a token writes text, and at
    the last step allows only such a token."""
    from scratchformer.app.data import CharTokenizer
    from scratchformer.app.translate import translate
    from scratchformer.engine.decode import greedy_decode
    from scratchformer.engine.models import Transformer, TransformerConfig

    tok = CharTokenizer.fit(["ab c"])
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=len(tok.vocab)))
    space, eos = tok.encode(" ")[0], model.config.eos_id
    real = model.decode_step

    def biased(tokens, kv):
        logits = real(tokens, kv) * 0.0
        logits[..., space], logits[..., eos] = 10.0, 9.0
        return logits

    monkeypatch.setattr(model, "decode_step", biased)
    src = np.array([tok.encode("ab")])
    assert tok.decode(greedy_decode(model, src, min_len=1)[0]).strip() == ""  # blank
    for search in ("greedy", "beam"):
        out = translate(model, tok, ["ab", "c"], search=search, max_len_b=4, min_len=1)
        assert all(text.strip() for text in out), out
    blank = translate(model, tok, ["ab"], search="greedy", max_len_b=4, min_len=0)
    assert blank[0].strip() == ""  # min_len 0 asks for no text


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--max-len-a", "0", "--max-len-b", "0"], "let a one-token sentence have 0 tokens"),
        (["--max-len-a", "0.5", "--max-len-b", "0", "--min-len", "2"], "fewer than --min-len 2"),
        (["--min-len", "1000"], "--min-len 1000 is more than the 63 tokens this model can"),
    ],
    ids=["no-token-at-all", "fewer-than-min-len", "min-len-beyond-the-model"],
)
@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_lengths_that_break_the_promise_are_refused(
    reverse_model, pairs_dir, tmp_path, refused, command, flags, says
):
    if command == "translate":
        src = tmp_path / "src.txt"
        src.write_text("abc\n", encoding="utf-8")
        argv = ["translate", "--checkpoint", str(reverse_model[0]), "--input", str(src)]
    else:
        argv = ["evaluate", "--checkpoint", str(reverse_model[0]), "--data-dir", str(pairs_dir)]
    refused([*argv, *flags], says)


def test_evaluate_refuses_sentences_its_checkpoint_cannot_read(reverse_model, tmp_path, refused):
    """A reverse model (10 letters) against translation pairs: most of the source is
    <unk> to it, and its scores would be noise."""
    d = tmp_path / "bible"
    d.mkdir()
    rows = "En el principio creó Dios los cielos y la tierra.\tIn the beginning...\n"
    for split in ("train", "dev", "test"):
        (d / f"{split}.tsv").write_text(rows, encoding="utf-8")
    argv = ["evaluate", "--checkpoint", str(reverse_model[0]), "--data-dir", str(d)]
    line = refused(argv, f"{d / 'test.tsv'}: ", "of its source tokens are unknown")
    assert "(it was trained on the reverse task)" in line


# -- a resumed run goes on from where it is ----------------------------------------------------
def test_a_resume_to_fewer_steps_than_done_is_refused(tmp_path, refused):
    from task_data import TINY_RUN

    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "--run-dir", str(run), "--steps", "4", "--no-test"]) == 0
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    line = refused(["train", "--run-dir", str(run), "--resume", "--steps", "2"], "train.steps = 2")
    assert "the run is at step 4, and a resumed run only goes on" in line
    assert {p: p.read_bytes() for p in files} == files  # averaged.npz untouched too


def test_a_data_position_beyond_the_epoch_is_refused(tmp_path, refused):
    import json

    from task_data import TINY_RUN

    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "--run-dir", str(run), "--steps", "2", "--no-test"]) == 0
    path = run / "checkpoints" / "checkpoint_2.npz"
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(arrays.pop("__meta__").tobytes())
    header["train_state"]["batch_index"] = 10**9
    blob = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(path, **arrays, __meta__=blob)
    line = refused(["train", "--run-dir", str(run), "--resume", "--steps", "4"], str(path))
    assert "its data position (batch 1000000000 of epoch 0) is not one a run of 2 steps" in line


# -- start-up: output encodings and plotting backends that cannot work -------------------------
def _run(argv, cwd, **env):
    return subprocess.run(
        [sys.executable, "-m", "scratchformer", *argv],
        cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--task", "reverse", "--name", "caffè", "--steps", "1"],
        ["generate", "--checkpoint", "x.npz", "--prompt", "año"],
    ],
    ids=["run-name", "prompt"],
)
def test_an_output_encoding_that_cannot_write_the_command_line_is_one_line(tmp_path, argv):
    p = _run(argv, tmp_path, PYTHONIOENCODING="ascii")
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and "internal error" not in p.stderr
    assert "the output encoding ascii cannot write" in p.stderr
    assert "set PYTHONIOENCODING=utf-8" in p.stderr
    assert list(tmp_path.iterdir()) == []  # no run directory made


def test_a_run_name_from_a_config_the_output_cannot_write_is_refused_first(tmp_path):
    (tmp_path / "c.toml").write_text('name = "caffè"\n', encoding="utf-8")
    p = _run(["train", "--config", "c.toml"], tmp_path, PYTHONIOENCODING="ascii")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "cannot write '\\xe8' (in 'caff\\xe8')" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c.toml"]


def test_text_the_output_encoding_cannot_write_is_one_line(capsys):
    """Text read from a file, not the command line (a translation), that the output
    cannot write: one line with the code of an error, not an internal one."""
    from scratchformer.app import cli

    rc = cli._report("translate", UnicodeEncodeError("ascii", "año", 1, 2, "ordinal"))
    assert rc == 2 and capsys.readouterr().err.splitlines() == [
        "scratchformer translate: error: the output encoding cannot write 'ñ' (ascii): set "
        "PYTHONIOENCODING=utf-8, or a UTF-8 locale"
    ]


def test_an_unknown_plotting_backend_is_one_line(tmp_path):
    pytest.importorskip("matplotlib")
    p = _run(["plot", "schedule", "-o", str(tmp_path / "s.png")], tmp_path, MPLBACKEND="nonsense")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "MPLBACKEND=nonsense is not a backend matplotlib knows" in p.stderr
    assert not (tmp_path / "s.png").exists()


# -- start-up: Ctrl-C while the program loads ---------------------------------------------
#: the ``scratchformer`` program as its installed script starts it, with Ctrl-C arriving
#: while the module named in argv[1] is being imported
_CTRL_C_WHILE_LOADING = """
import os
import signal
import sys
import time

LOADING = sys.argv.pop(1)
# Ctrl-C as a terminal's shell leaves it for a command (a job started in the background
# inherits it ignored, and the program then rightly ignores it too)
signal.signal(signal.SIGINT, signal.default_int_handler)


class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == LOADING:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the signal is handled before the import goes on
        return None


sys.meta_path.insert(0, CtrlC())
from scratchformer.__main__ import main

sys.exit(main())
"""


@pytest.mark.parametrize(
    "module", ["numpy", "scratchformer.app.commands.train", "scratchformer.app.commands.kernels"]
)
def test_ctrl_c_while_the_program_loads_is_one_line(tmp_path, module):
    """NumPy and the commands load in a few tenths of a second, before a command's own
    handling of Ctrl-C begins: Ctrl-C then is one line and the shell's code, 130. The
    program's script imports the package and its ``__main__``, which load nothing more."""
    argv = [sys.executable, "-c", _CTRL_C_WHILE_LOADING, module, "train", "--steps", "1"]
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 130 and p.stderr.splitlines() == ["scratchformer: stopped by Ctrl-C"]
    assert list(tmp_path.iterdir()) == []


#: every module searched for while the program's ``__main__`` loads, and the handler of
#: SIGINT at that moment
_GUARDED_FROM_THE_START = """
import _signal
import sys

_signal.signal(_signal.SIGINT, _signal.default_int_handler)  # as in a terminal


class Spy:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != "scratchformer":
            print(name, getattr(_signal.getsignal(_signal.SIGINT), "__name__", "?"))
        return None


import scratchformer  # the package first, as the script's import does

sys.modules.pop("signal", None)  # looked up by __main__ even where start-up loaded it
sys.meta_path.insert(0, Spy())
import scratchformer.__main__
"""


def test_ctrl_c_is_guarded_before_the_program_loads_anything():
    """The program's script imports the package (which runs nothing) and its
    ``__main__``, whose first statement is the guard: a module searched for from then on
    (``signal``, whose enums take a millisecond to build) finds Ctrl-C guarded, so that
    only Python's own start-up (``site``) comes before it."""
    p = subprocess.run(
        [sys.executable, "-c", _GUARDED_FROM_THE_START], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    looked_up = dict(line.split() for line in p.stdout.splitlines())
    assert "signal" in looked_up and set(looked_up.values()) == {"_stop"}, looked_up


def _program() -> list:
    """The installed ``scratchformer`` script beside this Python, else ``-m``."""
    script = Path(sys.executable).parent / "scratchformer"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "scratchformer"]


#: the program as its script starts it, saying on the descriptor in argv[1] when its
#: entry point is about to be called (Python's own start-up, before it, is not ours)
_STARTED = """
import os
import signal
import sys

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
from scratchformer.__main__ import main

os.write(int(sys.argv.pop(1)), b"x")
sys.exit(main())
"""

#: seconds after the entry point starts at which Ctrl-C arrives: NumPy's import, the
#: commands' imports, the configuration, drawing the data, the first steps, the end
DELAYS = [0.001, 0.01, 0.03, 0.05, 0.08, 0.11, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0, 1.5]


@pytest.mark.parametrize("delay", DELAYS)
def test_ctrl_c_at_any_moment_is_one_line_and_130(tmp_path, delay):
    """A real SIGINT at a moment after the entry point starts: exit 130 and one line
    (a run that is training first says it stops after the step in flight), or the
    command ended first (exit 0); never a traceback."""
    read, write = os.pipe()
    argv = [sys.executable, "-c", _STARTED, str(write), "train", "--config", "reverse"]
    argv += ["--steps", "3", "--no-progress", "--run-dir", str(tmp_path / "run"), "--no-test"]
    p = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        pass_fds=(write,),
    )
    os.close(write)
    assert os.read(read, 1) == b"x"
    os.close(read)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Ctrl-C: stopping")]
    assert "Traceback" not in err, err
    assert (p.returncode, len(lines)) in ((130, 1), (0, 0)), (p.returncode, err)
    assert p.returncode == 0 or "stopped by Ctrl-C" in lines[0]


@pytest.mark.parametrize("stream", ["stdin", "stdout"])
def test_a_closed_standard_stream_is_named_in_one_line(tmp_path, tiny_checkpoint, stream):
    """``translate <&-`` reads nothing: refused naming standard input; ``>&-`` leaves
    nowhere to write: refused naming standard output (the shell's ``<&-``/``>&-`` close
    the descriptor before the program starts)."""
    fd = 0 if stream == "stdin" else 1
    argv = [*_program(), "translate", "--checkpoint", str(tiny_checkpoint), "--greedy"]
    p = subprocess.run(
        argv,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL if fd == 1 else None,
        stdout=subprocess.PIPE if fd == 0 else None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(fd),
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    name = "standard input is closed (<&-)" if fd == 0 else "standard output is closed (>&-)"
    assert name in lines[0]


def test_the_package_and_its_program_load_nothing_before_the_command_line():
    code = "import sys, scratchformer.__main__; print(sorted(sys.modules))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = {m for m in eval(p.stdout) if m.split(".")[0] in ("scratchformer", "numpy")}
    assert loaded == {"scratchformer", "scratchformer.__main__"}
