"""Resources: what the commands hold in memory and when their output comes.

Streaming translation (``translate``, ``evaluate``): the input is read, decoded and
written a chunk of lines at a time (``--chunk-size``, default ``CHUNK_SIZE``), so that

- the output is the same whatever the chunk size (sorting and batching happen within a
  chunk, and the searches are batch-invariant);
- the first lines come out while the input is still being written (a pipe);
- the peak memory does not grow with the length of the input (slow: 200,000 lines).
"""

import json
import os
import queue
import random
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from task_data import TINY_RUN
from timing import untimed

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.cli import main
from scratchformer.app.translate import translate

LETTERS = "abcdefghij"  # the reverse task's alphabet (10 symbols)


def reverse_lines(n: int, seed: int = 0) -> list[str]:
    """``n`` source lines of the reverse task (1-12 letters), always the same for a seed."""
    r = random.Random(seed)
    return ["".join(r.choice(LETTERS) for _ in range(r.randint(1, 12))) for _ in range(n)]


def _cli(capsys, argv):
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


MODES = {
    "greedy": ["--greedy"],
    "beam": ["--beam", "3"],
    "nbest": ["--beam", "3", "--nbest", "2", "--scores"],
}
# lines of all lengths (so that each chunk is sorted differently), blank ones, unknown ones
STREAM_INPUT = reverse_lines(40, seed=1) + ["", "abc", "  ", "aøb"] + reverse_lines(9, seed=2)


def _same_nbest(a: str, b: str) -> None:
    """Equal n-best outputs: line numbers, ranks and texts exactly; scores to float32
    rounding (batches made of other sentences change their last digit, as batch sizes
    always did)."""
    rows_a = [line.split("\t") for line in a.splitlines()]
    rows_b = [line.split("\t") for line in b.splitlines()]
    assert [(r[:2], r[4:]) for r in rows_a] == [(r[:2], r[4:]) for r in rows_b]
    scores_a = [float(x) for r in rows_a for x in r[2:4]]
    scores_b = [float(x) for r in rows_b for x in r[2:4]]
    assert scores_a == pytest.approx(scores_b, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize(
    "chunk", [pytest.param(c, marks=pytest.mark.slow) for c in ("1", "7")] + ["3", "default-3"]
)
@pytest.mark.parametrize("mode", MODES)
def test_chunked_translation_equals_one_chunk(
    reverse_model, tmp_path, capsys, monkeypatch, mode, chunk
):
    ckpt, model, tok = reverse_model
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s in STREAM_INPUT), encoding="utf-8")
    argv = ["translate", "--checkpoint", ckpt, "--input", src, "--batch-size", "4", *MODES[mode]]
    whole = _cli(capsys, [*argv, "--chunk-size", "100000"])
    if chunk == "default-3":  # the module constant is the default
        monkeypatch.setattr("scratchformer.app.commands.translate.CHUNK_SIZE", 3)
        chunked = _cli(capsys, argv)
    else:
        chunked = _cli(capsys, [*argv, "--chunk-size", chunk])
    if mode != "nbest":  # the text, and what the Python API gives for the whole input
        assert chunked == whole
        options = {"search": "greedy"} if mode == "greedy" else {"beam_size": 3}
        hyps = translate(model, tok, STREAM_INPUT, batch_size=4, **options)
        assert whole == "".join(h + "\n" for h in hyps)
        return
    _same_nbest(chunked, whole)
    lines = whole.split("\n")[:-1]
    blank = [n for n, s in enumerate(STREAM_INPUT, start=1) if not s.strip()]  # "", "  "
    assert len(blank) == 2 and len(lines) == 2 * (len(STREAM_INPUT) - 2) + 2
    assert lines.count("") == 2  # an empty line each, no n-best lines
    assert [int(line.split("\t")[0]) for line in lines if line] == [
        n for n in range(1, len(STREAM_INPUT) + 1) if n not in blank for _ in (1, 2)
    ]


@pytest.mark.parametrize("chunk", ["1", "4"])
def test_evaluate_writes_the_same_output_in_chunks(reverse_model, tmp_path, capsys, chunk):
    pytest.importorskip("sacrebleu")
    ckpt, model, tok = reverse_model
    sources = reverse_lines(11, seed=3)
    (tmp_path / "test.tsv").write_text("".join(f"{s}\t{s[::-1]}\n" for s in sources), "utf-8")
    argv = ["evaluate", "--checkpoint", ckpt, "--data-dir", tmp_path, "--greedy"]
    whole = _cli(capsys, [*argv, "--output", tmp_path / "whole.txt", "--chunk-size", "1000"])
    chunked = _cli(capsys, [*argv, "--output", tmp_path / "chunked.txt", "--chunk-size", chunk])
    expected = "".join(h + "\n" for h in translate(model, tok, sources, search="greedy"))
    assert (tmp_path / "chunked.txt").read_text("utf-8") == expected
    assert (tmp_path / "whole.txt").read_text("utf-8") == expected
    bleu = [line for line in whole.splitlines() if line.startswith("BLEU = ")]
    assert len(bleu) == 1 and bleu[0] in chunked  # corpus BLEU over all the sentences


def _line_reader(stream) -> queue.Queue:
    """A queue that receives each line of ``stream`` as it comes, then None at its end."""
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_translation_output_comes_while_the_input_is_still_open(reverse_model):
    """Through a pipe, with chunks of 3 lines: each chunk's output is read back before
    the next chunk is even written, and stdin is closed only at the end."""
    ckpt, model, tok = reverse_model
    sources = reverse_lines(9, seed=4)
    expected = translate(model, tok, sources, search="greedy")
    cmd = [sys.executable, "-m", "scratchformer", "translate", "--checkpoint", str(ckpt)]
    child = subprocess.Popen(
        [*cmd, "--greedy", "--chunk-size", "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out = _line_reader(child.stdout)
        for i in range(0, 9, 3):
            child.stdin.write("".join(s + "\n" for s in sources[i : i + 3]).encode())
            child.stdin.flush()
            got = [out.get(timeout=60).decode() for _ in range(3)]  # never hangs
            assert got == [h + "\n" for h in expected[i : i + 3]]
        child.stdin.close()
        assert out.get(timeout=60) is None  # no more output, and the end of it
        assert child.wait(timeout=60) == 0
        assert child.stderr.read().decode().startswith("translated 9 sentences in ")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# Starts a command and reports its peak resident memory. A child's ru_maxrss counts the
# memory of the process it was forked from (Linux keeps the high-water mark across
# exec), so the command is started from this small process, not from the test's own.
MEASURE = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[1:])\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status), file=sys.stderr)\n"
)


def _translate_measured(ckpt, src: str) -> dict:
    """Translate the file ``src`` greedily in a child process: its output lines, its
    peak resident memory (bytes, the kernel's count for that process), the wall time
    and the time to the first output line."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "scratchformer", "translate", "--checkpoint", str(ckpt)]
    child = subprocess.Popen(
        [sys.executable, "-c", MEASURE, *cmd, "--greedy", "--input", src],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines, first = [], None
    for line in child.stdout:
        first = first or time.perf_counter() - t0
        lines.append(line.decode().rstrip("\n"))
    err = child.stderr.read().decode()
    assert child.wait() == 0, err
    wall = time.perf_counter() - t0
    peak_kb, code = map(int, err.splitlines()[-1].split())
    assert code == 0, err
    return {"lines": lines, "peak": peak_kb * 1024, "wall": wall, "first": first}


@pytest.mark.slow
def test_translation_memory_does_not_grow_with_the_input(tmp_path, capsys):
    """200,000 lines translated with the default reverse model (configs/reverse.toml's
    model; trained 300 steps only, which is enough to emit <eos> and keep outputs
    short) need no more memory than 20,000 lines: the peak resident memory of the
    child process is within 30 MB, and the output is the one the model gives."""
    run = tmp_path / "run"
    argv = ["train", "--steps", "300", "--run-dir", run, "--no-progress", "--no-test"]
    assert main([str(a) for a in argv]) == 0
    ckpt = run / "checkpoints" / "final.npz"
    sources = reverse_lines(200_000, seed=5)
    small, big = tmp_path / "20k.txt", tmp_path / "200k.txt"
    small.write_text("".join(s + "\n" for s in sources[:20_000]), encoding="utf-8")
    big.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    m20 = _translate_measured(ckpt, str(small))
    m200 = _translate_measured(ckpt, str(big))
    assert len(m200["lines"]) == 200_000
    assert m200["lines"][:20_000] == m20["lines"]
    loaded, tok = load_with_tokenizer(ckpt)
    assert m200["lines"][:300] == translate(loaded.model, tok, sources[:300], search="greedy")
    with capsys.disabled():  # the figures, for whoever runs this test
        mb = 2**20
        print(
            f"\n  translate --greedy: 20k lines peak {m20['peak'] / mb:.1f} MB, "
            f"{m20['wall']:.1f} s; 200k lines peak {m200['peak'] / mb:.1f} MB, "
            f"{m200['wall']:.1f} s, first line after {m200['first']:.2f} s"
        )
    assert m200["peak"] < m20["peak"] + 30 * 2**20


# -- requests estimated up front ------------------------------------------------------------
@pytest.fixture
def little_memory(monkeypatch):
    """A machine with 50 MB available (the estimate must refuse before allocating)."""
    from scratchformer.engine import memory

    monkeypatch.setattr(memory, "available_memory", lambda: 50_000_000)


def _estimate_refused(refused, argv, *fragments):
    line = refused(argv, "would need about", "of memory, and", "is available", *fragments)
    assert "out of memory" not in line  # the estimate, not a MemoryError caught late


def test_a_huge_beam_is_refused_with_the_estimate(reverse_model, tmp_path, refused):
    src = tmp_path / "src.txt"
    src.write_text("abc\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(reverse_model[0]), "--input", str(src)]
    _estimate_refused(
        refused, [*argv, "--beam", "100000000"], "a beam of 100000000", "lower the beam"
    )


def test_a_beam_that_does_not_fit_a_small_machine(reverse_model, tmp_path, refused, little_memory):
    src = tmp_path / "src.txt"
    src.write_text("abcdefghij\n" * 40, encoding="utf-8")
    argv = ["translate", "--checkpoint", str(reverse_model[0]), "--input", str(src)]
    _estimate_refused(refused, [*argv, "--beam", "20000"], "0.05 GB is available")


def test_too_many_samples_are_refused_with_the_estimate(lm_checkpoint, refused):
    argv = ["generate", "--checkpoint", str(lm_checkpoint), "--num", "1000000000"]
    _estimate_refused(refused, argv, "1000000000 samples", "ask for fewer samples or tokens")


@pytest.mark.parametrize(
    "setting, fragments",
    [
        ("task.train_size=1000000000", ["generated strings", "lower task.train_size"]),
        ("model.max_len=1000000000", ["max_len 1000000000)", "lower model.max_len"]),
    ],
)
def test_a_run_that_cannot_fit_is_refused_before_it_starts(tmp_path, refused, setting, fragments):
    run = tmp_path / "run"
    _estimate_refused(
        refused, ["train", *TINY_RUN, "--run-dir", str(run), "--set", setting], *fragments
    )
    assert not (run / "checkpoints").exists()


def test_a_positional_plot_too_large_is_refused(refused, tmp_path):
    argv = ["plot", "positional", "--positions", "1000000000", "-o", str(tmp_path / "p.png")]
    _estimate_refused(refused, argv, "positions x 512 dimensions", "draw fewer --positions")
    assert not (tmp_path / "p.png").exists()


def test_requests_that_fit_are_not_refused(reverse_model, tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("abc\nde\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(reverse_model[0]), "--input", str(src)]
    assert main([*argv, "--beam", "64"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


# -- the model's own size, before any parameter exists ---------------------------------------
@pytest.fixture
def allocations(monkeypatch):
    """The parameters allocated while the test runs (their names): a request refused by
    its estimate allocates none (shapes read by declaring them do not count)."""
    from scratchformer.engine.nn.module import Declared, Module

    made, real = [], Module.add_parameter

    def add_parameter(self, name, value):
        if not isinstance(value, Declared):
            made.append(name)
        return real(self, name, value)

    monkeypatch.setattr(Module, "add_parameter", add_parameter)
    return made


def test_the_allocation_count_sees_every_parameter_of_a_model_built(
    tiny_checkpoint, refused, allocations
):
    """The count the refusals below rely on is not blind: a checkpoint of the right size
    that is loaded, and a gradient check of a model that fits, allocate parameters."""
    ck, _ = load_with_tokenizer(tiny_checkpoint)
    assert len(allocations) >= len(ck.model.parameters()) > 0
    del allocations[:]
    argv = ["gradcheck", "--preset", "tiny", "--directions", "1", "--layers", "200000"]
    refused(argv, "lower --layers")
    assert allocations == []
    assert main(["gradcheck", "--preset", "tiny", "--directions", "1", "--no-progress"]) == 0
    assert allocations


def test_a_gradient_check_of_a_huge_model_is_refused_before_any_parameter(refused, allocations):
    argv = ["gradcheck", "--preset", "base", "--directions", "1", "--layers", "100000"]
    line = refused(argv, "a gradient check of a Transformer of 735 G parameters (N 100000 + ")
    assert "would need about" in line and "lower --layers" in line
    assert allocations == []


def test_a_checkpoint_declaring_a_huge_model_is_refused_before_any_parameter(
    tiny_checkpoint, tmp_path, refused, allocations
):
    """A 100 KB file whose config says N = 100000: its few arrays cannot be that model's,
    which is known from the declared parameter count, before any parameter is built."""
    with np.load(tiny_checkpoint, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(arrays.pop("__meta__").tobytes())
    header["config"]["N"] = header["config"]["N_dec"] = 100_000
    path = tmp_path / "checkpoint_2.npz"
    blob = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(path, **arrays, __meta__=blob)
    src = tmp_path / "src.txt"
    src.write_text("abc\n", encoding="utf-8")
    line = refused(["translate", "--checkpoint", str(path), "--input", str(src)], str(path))
    assert "parameters do not match the model its config describes" in line
    assert "(N 100000 + 100000," in line
    assert allocations == []  # known from the declared count: not one parameter built


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--preset", "small", "--samples", "0"], "check fewer entries (--samples)"),
        (["--directions", "1000000000"], "check fewer --directions"),
    ],
    ids=["every-entry-of-small", "a-billion-directions"],
)
def test_a_gradient_check_longer_than_an_hour_needs_force(refused, argv, says):
    line = refused(["gradcheck", *argv], "this check would take about", says)
    assert "forward passes of" in line and "--force" in line


@pytest.mark.parametrize(
    "argv",
    [["--norm", "post"], ["--explain", "embed.E"], ["--directions", "1", "--norm", "pre"]],
    ids=["entries", "explain", "directions"],
)
def test_every_kind_of_check_is_timed_and_runs_with_force(refused, capsys, monkeypatch, argv):
    """With a limit of a millisecond, each check is refused, and --force runs it."""
    monkeypatch.setattr("scratchformer.app.commands.gradcheck_clock.TIME_LIMIT", 1e-3)
    refused(["gradcheck", *argv, "--samples", "2"], "this check would take about", "--force")
    assert main(["gradcheck", *argv, "--samples", "2", "--force", "--no-progress"]) == 0
    assert "estimated time: about" in capsys.readouterr().out


def test_a_gradient_check_prints_its_estimated_time(capsys):
    assert main(["gradcheck", "--norm", "post", "--samples", "2", "--no-progress"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("estimated time: about ") and "forward passes of" in first


def test_the_estimate_counts_every_pass_the_check_runs(capsys, monkeypatch):
    """A directional check of the tiny model: per norm, a copy, one forward and one
    backward pass for the analytic gradient, two forward passes per direction (one
    direction per tensor and one for all parameters), and every entry moved twice."""
    from scratchformer.app.commands import gradcheck_clock as gradcheck

    monkeypatch.setattr(gradcheck, "probe", lambda *a: gradcheck.Probe(1.0, 2.0, 3.0))
    monkeypatch.setattr(gradcheck, "TIME_LIMIT", 1e9)
    assert main(["gradcheck", "--directions", "1", "--norm", "pre", "--no-progress"]) == 0
    out = capsys.readouterr().out
    tensors = int(re.search(r"parameters in (\d+) tensors", out)[1])
    n = int(re.search(r"([\d,]+) parameters in", out)[1].replace(",", ""))
    forwards = 2 * (tensors + 1)
    seconds = 1 + 2 + 3 + 2 * forwards + 2 * n * gradcheck.ENTRY_SECONDS
    assert f"({forwards + 1:,} forward passes of 2000.0 ms and 1 backward pass of 3000.0 ms" in out
    assert f"estimated time: about {gradcheck.duration(seconds)} (" in out
    assert f"; {2 * n:,} entries moved along directions)" in out


def test_a_check_past_twice_its_estimate_says_so_once_and_shows_both_times(capsys, monkeypatch):
    from scratchformer.app.commands import gradcheck_clock as gradcheck

    monkeypatch.setattr(gradcheck, "probe", lambda *a: gradcheck.Probe(0.0, 1e-9, 1e-9))
    monkeypatch.setattr(gradcheck, "load_average", lambda: 0.0)  # no note before it starts
    argv = ["gradcheck", "--norm", "post", "--samples", "3", "--no-progress"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err.count("note: this check has run more than twice its estimate") == 1
    assert "cores are likely busy" in err and untimed(err) == "", err  # the note alone
    assert "--threads 1" not in err  # it runs on one thread already
    # the time taken in any unit: a busy machine makes seconds minutes
    assert re.search(r"float64 \([\d.,e+-]+ (s|ms|min|h|days); estimated [\d.e-]+ s(; .* of CPU "
                     r"time)?\)", out), out
    assert main([*argv, "--threads", "2"]) == 0
    assert "give it one BLAS thread (--threads 1)" in capsys.readouterr().err


def test_an_empty_explain_names_no_parameter(refused):
    refused(["gradcheck", "--explain", ""], "this model has no parameter ''")


def test_a_run_whose_model_cannot_fit_names_the_model(tmp_path, refused, allocations):
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--set", "model.N=1000000000"]
    refused(argv, "training a Transformer of", "the model is too large: lower model.N")
    assert allocations == [] and not run.exists()


def test_a_run_whose_batch_cannot_fit_names_the_batch(tmp_path, refused, little_memory):
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--max-tokens", "10000000"]
    refused(argv, "on micro-batches of 10000000 tokens", "lower train.max_tokens")


def test_more_micro_batches_a_step_than_the_data_holds_are_refused(tmp_path, refused):
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--accum-steps", "1000000000"]
    refused(argv, "train.accum_steps = 1000000000 is more micro-batches per step than the")
    assert not (run / "checkpoints").exists()


@pytest.fixture
def stand_in_mpiexec(tmp_path, monkeypatch):
    """An ``mpiexec`` that only writes down how it was called, on the PATH and found as
    the launcher: no real one ever starts here."""
    from scratchformer.app import distributed

    bin_dir, log = tmp_path / "bin", tmp_path / "mpiexec.log"
    bin_dir.mkdir()
    fake = bin_dir / "mpiexec"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(distributed, "find_mpiexec", lambda: str(fake))
    monkeypatch.setattr(distributed, "missing_mpi4py", lambda: False)
    return log


def test_more_ranks_than_cores_are_refused_before_mpiexec_starts(stand_in_mpiexec, refused):
    from scratchformer.app.train.limits import cores

    line = refused(["train", *TINY_RUN, "--ranks", "100000"], "--ranks 100000 would start")
    assert f"which has {cores()} cores" in line
    assert not stand_in_mpiexec.exists()  # never called


def test_ranks_within_the_cores_are_handed_to_mpiexec(stand_in_mpiexec, capsys):
    assert main(["train", *TINY_RUN, "--ranks", "2"]) == 0
    assert stand_in_mpiexec.read_text().startswith("-n 2 ")
