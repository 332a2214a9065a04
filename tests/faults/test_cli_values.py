"""The command line: bad values refused in one line, its last line of defence, and a
backend that cannot start.

Bad values on the command line: every flag of every command refuses a value out of its
range in one line naming the flag and the range, before anything is loaded; misspelt
flags, commands and choices get a guess. Values at the edge of a range work and give
the right result.

The last line of defence, and a backend that cannot start:

Every error a user can cause has its own one-line message; anything else that reaches
the top is reported in one line too ("internal error: ..., run with --debug for the
traceback"), with a non-zero exit, and ``--debug`` (before or after the command) shows
the traceback instead. ``SCRATCHFORMER_BACKEND`` naming a backend that cannot start is
refused by the command line in one line, while the tests still run (on NumPy).
"""

import importlib.util
import os
import subprocess
import sys

import pytest

from scratchformer.app import cli
from scratchformer.app.cli import main as cli_main
from scratchformer.app.commands import gradcheck
from scratchformer.engine import backend as B


@pytest.fixture
def broken_command(monkeypatch):
    """``scratchformer gradcheck`` made to fail the way a bug of ours would."""

    def boom(args):
        raise ValueError("operands could not be broadcast together\nsecond line")

    real = gradcheck.add_parser

    def add_parser(sub):
        real(sub)
        sub.choices["gradcheck"].set_defaults(func=boom)

    monkeypatch.setattr(gradcheck, "add_parser", add_parser)


def test_an_unexpected_error_is_one_line_with_a_way_to_the_traceback(broken_command, capsys):
    assert cli.main(["gradcheck"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "scratchformer gradcheck: internal error: ValueError: operands could not be "
        "broadcast together (run with --debug for the traceback)"
    ]


@pytest.mark.parametrize("argv", [["--debug", "gradcheck"], ["gradcheck", "--debug"]])
def test_debug_shows_the_traceback(broken_command, argv):
    with pytest.raises(ValueError, match="broadcast"):
        cli.main(argv)


def test_out_of_memory_is_one_line(monkeypatch, capsys):
    real = gradcheck.add_parser

    def add_parser(sub):
        real(sub)
        sub.choices["gradcheck"].set_defaults(func=lambda args: (_ for _ in ()).throw(MemoryError))

    monkeypatch.setattr(gradcheck, "add_parser", add_parser)
    assert cli.main(["gradcheck"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "out of host memory" in err[0] and "--preset" in err[0]


def _run(args, env_backend):
    env = {**os.environ, "SCRATCHFORMER_BACKEND": env_backend}
    return subprocess.run(
        [sys.executable, "-m", "scratchformer", *args], capture_output=True, text=True, env=env
    )


@pytest.mark.skipif(B.cupy_available(), reason="CuPy with a GPU is available here")
def test_a_backend_that_cannot_start_is_refused_in_one_line():
    r = _run(["gradcheck"], "cupy")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("scratchformer gradcheck: error: SCRATCHFORMER_BACKEND=cupy:")
    if importlib.util.find_spec("cupy") is None:  # CuPy missing: both extras are named
        assert "'scratchformer[cuda12]'" in lines[0] and "'scratchformer[cuda13]'" in lines[0]
    else:  # installed without a GPU: which CUDA it is for, CuPy's reason, the docs page
        assert "no usable GPU for the cupy backend: CuPy " in lines[0]
        assert lines[0].endswith("which CuPy suits which driver: docs/gpu.md")
        assert len(lines[0]) < 300, len(lines[0])
    assert _run(["--backend", "numpy", "--version"], "cupy").returncode == 0  # named: fine


def test_the_backend_is_named_before_or_after_the_command():
    parser = cli.build_parser()
    for argv in (["--backend", "cupy", "train"], ["train", "--backend", "cupy"]):
        assert parser.parse_args(argv).backend == "cupy"
    assert parser.parse_args(["plot", "schedule", "--backend", "cupy"]).backend == "cupy"
    assert parser.parse_args(["--backend", "numpy", "train", "--backend", "cupy"]).backend == "cupy"
    assert parser.parse_args(["train"]).backend is None  # then $SCRATCHFORMER_BACKEND


def test_an_unknown_backend_name_is_refused_in_one_line():
    r = _run(["gradcheck"], "tpu")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown backend 'tpu'" in lines[0]


@pytest.mark.skipif(B.cupy_available(), reason="CuPy with a GPU is available here")
def test_the_tests_still_run_with_an_unusable_backend_named(tmp_path):
    """pytest collects and runs (on NumPy), reporting the CuPy copies as skipped."""
    test = tmp_path / "test_one.py"
    test.write_text(
        "from scratchformer import backend as B\n"
        "def test_numpy_is_active():\n"
        "    assert B.backend_name() == 'numpy'\n"
        "    assert 'SCRATCHFORMER_BACKEND=cupy' in str(B.env_error)\n"
    )
    env = {**os.environ, "SCRATCHFORMER_BACKEND": "cupy"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout


NONE = "/nonexistent/checkpoint.npz"  # never read: the command line is refused first

#: (argv, fragments of the one line)
FLAG_VALUES = [
    # train
    (["train", "--seed", "-1"], "argument --seed: must be a whole number >= 0, got '-1'"),
    (["train", "--seed", "abc"], "argument --seed: must be a whole number >= 0, got 'abc'"),
    (["train", "--seed", "1.5"], "argument --seed: must be a whole number"),
    (["train", "--steps", "0"], "argument --steps: must be a whole number >= 1, got '0'"),
    (["train", "--steps", "-3"], "argument --steps: must be a whole number >= 1"),
    (["train", "--steps", "1e3"], "argument --steps: must be a whole number"),
    (["train", "--max-tokens", "0"], "argument --max-tokens: must be a whole number >= 1"),
    (["train", "--accum-steps", "0"], "argument --accum-steps: must be a whole number >= 1"),
    (["train", "--time-limit", "-1"], "argument --time-limit: must be a finite number >= 0"),
    (["train", "--time-limit", "nan"], "argument --time-limit: must be a finite number"),
    (["train", "--time-limit", "inf"], "argument --time-limit: must be a finite number"),
    (["train", "--log-every", "-1"], "argument --log-every: must be a whole number >= 0"),
    (["train", "--eval-every", "-1"], "argument --eval-every: must be a whole number >= 0"),
    (["train", "--checkpoint-every", "-2"], "argument --checkpoint-every"),
    (["train", "--threads", "-1"], "argument --threads: must be a whole number >= 0"),
    (["train", "--warmup", "-5"], "argument --warmup: must be a whole number >= 0"),
    (["train", "--lr-factor", "0"], "argument --lr-factor: must be a finite number > 0"),
    (["train", "--lr-factor", "-1"], "argument --lr-factor: must be a finite number > 0"),
    (["train", "--lr-factor", "nan"], "argument --lr-factor: must be a finite number > 0"),
    (["train", "--lr-factor", "inf"], "argument --lr-factor: must be a finite number > 0"),
    (["train", "--lr-factor", "1e999"], "argument --lr-factor: must be a finite number"),
    (["train", "--lr-factor", "fast"], "argument --lr-factor: must be a finite number"),
    (["train", "--task", "lmm"], "invalid choice: 'lmm'", "(did you mean lm?)"),
    (["train", "--decode", "beem"], "invalid choice: 'beem'", "(did you mean beam?)"),
    (["train", "--stpes", "3"], "unrecognized arguments: --stpes", "(did you mean --steps?)"),
    (["train", "--lr_factor", "2"], "unrecognized arguments", "(did you mean --lr-factor?)"),
    (["train", "--steps"], "argument --steps: expected one argument"),
    # translate
    (["translate", "--checkpoint", NONE, "--beam", "0"], "argument --beam: must be a whole"),
    (["translate", "--checkpoint", NONE, "--beam", "-1"], "argument --beam"),
    (["translate", "--checkpoint", NONE, "--beam", "four"], "argument --beam"),
    (
        ["translate", "--checkpoint", NONE, "--alpha", "-1"],
        "argument --alpha: must be a finite number >= 0",
    ),
    (["translate", "--checkpoint", NONE, "--alpha", "nan"], "argument --alpha"),
    (["translate", "--checkpoint", NONE, "--alpha", "inf"], "argument --alpha"),
    (
        ["translate", "--checkpoint", NONE, "--nbest", "0"],
        "argument --nbest: must be a whole number >= 1",
    ),
    (["translate", "--checkpoint", NONE, "--max-len-a", "-1"], "argument --max-len-a"),
    (["translate", "--checkpoint", NONE, "--max-len-a", "nan"], "argument --max-len-a"),
    (["translate", "--checkpoint", NONE, "--max-len-b", "inf"], "argument --max-len-b"),
    (
        ["translate", "--checkpoint", NONE, "--min-len", "-1"],
        "argument --min-len: must be a whole number >= 0",
    ),
    (["translate", "--checkpoint", NONE, "--no-repeat-ngram", "-1"], "argument --no-repeat-ngram"),
    (
        ["translate", "--checkpoint", NONE, "--batch-size", "0"],
        "argument --batch-size: must be a whole number >= 1",
    ),
    (
        ["translate", "--checkpoint", NONE, "--chunk-size", "0"],
        "argument --chunk-size: must be a whole number >= 1",
    ),
    (["translate", "--beam", "4"], "the following arguments are required: --checkpoint"),
    (["translate", "--checkpoint", NONE, "--greedyy"], "(did you mean --greedy?)"),
    # evaluate
    (
        ["evaluate", "--checkpoint", NONE, "--limit", "-1"],
        "argument --limit: must be a whole number >= 0, got '-1'",
    ),
    (["evaluate", "--checkpoint", NONE, "--beam", "0"], "argument --beam"),
    (["evaluate", "--checkpoint", NONE, "--batch-size", "0"], "argument --batch-size"),
    (["evaluate", "--checkpoint", NONE, "--alpha", "inf"], "argument --alpha"),
    (["evaluate", "--checkpoint", NONE, "--max-len-a", "inf"], "argument --max-len-a"),
    (["evaluate", "--checkpoint", NONE, "--min-len", "-2"], "argument --min-len"),
    (["evaluate", "--checkpoint", NONE, "--split", "valid"], "invalid choice: 'valid'"),
    (["evaluate", "--checkpoint", NONE, "--split", "tset"], "(did you mean test?)"),
    # generate
    (
        ["generate", "--checkpoint", NONE, "--temperature", "nan"],
        "argument --temperature: must be a finite number >= 0",
    ),
    (["generate", "--checkpoint", NONE, "--temperature", "inf"], "argument --temperature"),
    (["generate", "--checkpoint", NONE, "--temperature", "-1"], "argument --temperature"),
    (
        ["generate", "--checkpoint", NONE, "--num", "0"],
        "argument --samples/--num: must be a whole number >= 1",
    ),
    (["generate", "--checkpoint", NONE, "--samples", "-1"], "argument --samples/--num"),
    (
        ["generate", "--checkpoint", NONE, "--top-p", "0"],
        "argument --top-p: must be a finite number > 0 and <= 1",
    ),
    (["generate", "--checkpoint", NONE, "--top-p", "1.5"], "argument --top-p"),
    (["generate", "--checkpoint", NONE, "--min-new", "-1"], "argument --min-new"),
    (["translate", "--checkpoint", NONE, "--top-p", "nan"], "argument --top-p"),
    (["translate", "--checkpoint", NONE, "--samples", "0"], "argument --samples"),
    (
        ["generate", "--checkpoint", NONE, "--max-new", "0"],
        "argument --max-new: must be a whole number >= 1",
    ),
    (["generate", "--checkpoint", NONE, "--max-new", "-1"], "argument --max-new"),
    (
        ["generate", "--checkpoint", NONE, "--top-k", "-1"],
        "argument --top-k: must be a whole number >= 0",
    ),
    (
        ["generate", "--checkpoint", NONE, "--seed", "-1"],
        "argument --seed: must be a whole number >= 0",
    ),
    # average
    (["average", "x", "--last", "zero"], "argument --last"),
    # plot
    (["plot", "schedule", "--d-model", "0"], "argument --d-model: must be a whole number >= 1"),
    (["plot", "schedule", "--warmup", "0"], "argument --warmup: must be a whole number >= 1"),
    (
        ["plot", "schedule", "--lr-factor", "nan"],
        "argument --lr-factor: must be a finite number > 0",
    ),
    (["plot", "schedule", "--lr-factor", "0"], "argument --lr-factor"),
    (["plot", "schedule", "--steps", "1"], "argument --steps: must be a whole number >= 2"),
    (
        ["plot", "positional", "--positions", "0"],
        "argument --positions: must be a whole number >= 1",
    ),
    (["plot", "positional", "--d-model", "1"], "argument --d-model: must be a whole number >= 2"),
    (
        ["plot", "attention", NONE, "abc", "--layer", "-1"],
        "argument --layer: must be a whole number >= 0",
    ),
    (["plot", "attention", NONE, "abc", "--head", "x"], "argument --head"),
    (["plot", "positions"], "invalid choice: 'positions'", "(did you mean positional?)"),
    (
        ["plot", "schedule", "--stpes", "9"],
        "scratchformer plot schedule: error:",
        "(did you mean --steps?)",
    ),
    # gradcheck
    (["gradcheck", "--layers", "0"], "argument --layers: must be a whole number >= 1"),
    (["gradcheck", "--vocab", "3"], "argument --vocab: must be a whole number >= 4"),
    (["gradcheck", "--dropout", "1"], "argument --dropout: must be a finite number >= 0 and < 1"),
    (["gradcheck", "--dropout", "-0.1"], "argument --dropout"),
    (["gradcheck", "--label-smoothing", "1"], "argument --label-smoothing: must be a finite"),
    (["gradcheck", "--label-smoothing", "1"], "argument --label-smoothing"),
    (["gradcheck", "--tol", "0"], "argument --tol: must be a finite number > 0"),
    (["gradcheck", "--tol", "nan"], "argument --tol"),
    (["gradcheck", "--seed", "-1"], "argument --seed"),
    (["gradcheck", "--samples", "-1"], "argument --samples: must be a whole number >= 0"),
    (["gradcheck", "--preset", "tyni"], "(did you mean tiny?)"),
    # data
    (["data", "genre", "--dev", "-0.1"], "argument --dev: must be a finite number >= 0 and < 1"),
    (["data", "genre", "--dev", "1"], "argument --dev"),
    (["data", "genre", "--test", "nan"], "argument --test"),
    (["data", "bibel"], "invalid choice: 'bibel'", "(did you mean bible?)"),
    # the command itself
    (["trian"], "invalid choice: 'trian'", "(did you mean train?)"),
    (["--backend", "tpu", "train"], "argument --backend: invalid choice: 'tpu'"),
    (["train", "--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
]


@pytest.mark.parametrize(
    "argv, fragments",
    [(a, f) for a, *f in FLAG_VALUES],
    ids=[" ".join(a) or "(nothing)" for a, *_ in FLAG_VALUES],
)
def test_a_bad_value_is_refused_in_one_line_before_any_work(refused, argv, fragments):
    line = refused(argv, *fragments)
    assert line.startswith("scratchformer") and "(see --help)" in line


# -- values at the edge of their range: accepted, and the result is right -----------------
def _out(capsys, argv) -> list[str]:
    assert cli_main(argv) == 0
    return capsys.readouterr().out.splitlines()


def test_beam_one_is_greedy(tiny_checkpoint, tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("abc\nhgfedcba\n\nj\n", encoding="utf-8")
    base = ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(src)]
    greedy = _out(capsys, [*base, "--greedy"])
    assert len(greedy) == 4 and greedy[2] == ""
    assert _out(capsys, [*base, "--beam", "1", "--alpha", "0"]) == greedy


def test_min_len_zero_and_alpha_zero_are_accepted(tiny_checkpoint, tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("abc\nde\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(src)]
    assert len(_out(capsys, [*argv, "--min-len", "0", "--alpha", "0", "--beam", "2"])) == 2


@pytest.mark.parametrize("limit, n", [(0, 3), (1, 1), (2, 2), (3, 3), (10, 3)])
def test_evaluate_limit_takes_exactly_the_first_n(tiny_checkpoint, pairs_dir, capsys, limit, n):
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--data-dir", str(pairs_dir)]
    pytest.importorskip("sacrebleu")
    out = _out(capsys, [*argv, "--greedy", "--limit", str(limit)])
    assert out[0].startswith(f"test: {n} sentence"), out[0]


def test_temperature_zero_is_greedy_and_top_k_one_too(lm_checkpoint, capsys):
    argv = ["generate", "--checkpoint", str(lm_checkpoint), "--max-new", "12", "--prompt", "the"]
    greedy = _out(capsys, [*argv, "--temperature", "0"])
    assert greedy == _out(capsys, [*argv, "--temperature", "0", "--seed", "7"])
    assert greedy == _out(capsys, [*argv, "--temperature", "1", "--top-k", "1", "--seed", "3"])


@pytest.mark.parametrize("num", [1, 3])
def test_generate_num_gives_that_many_samples(lm_checkpoint, capsys, num):
    argv = ["generate", "--checkpoint", str(lm_checkpoint), "--max-new", "5", "--num", str(num)]
    assert len(_out(capsys, argv)) == num


def test_an_empty_input_translates_to_nothing(tiny_checkpoint, tmp_path, capsys):
    src = tmp_path / "empty.txt"
    src.write_bytes(b"")
    assert (
        _out(capsys, ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(src)]) == []
    )


def test_nbest_above_the_beam_is_one_line(tiny_checkpoint, tmp_path, refused):
    src = tmp_path / "src.txt"
    src.write_text("abc\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(src)]
    refused([*argv, "--nbest", "5", "--beam", "4"], "nbest", "beam_size=4")


def test_dev_and_test_shares_leaving_no_training_data(refused):
    refused(["data", "genre", "--dev", "0.6", "--test", "0.5"], "leave no training data")


@pytest.mark.parametrize(
    "command, setting",
    [("train", "train.max_tokens"), ("translate", "--batch-size, --beam or --samples")],
)
def test_out_of_gpu_memory_is_one_line_naming_the_setting(monkeypatch, capsys, command, setting):
    """CuPy's OutOfMemoryError (it imports without a GPU) as one line: where, CuPy's
    figures, and the setting to lower for the command that ran out."""
    cupy_memory = pytest.importorskip("cupy.cuda.memory")
    from scratchformer.app.commands import train, translate

    module = {"train": train, "translate": translate}[command]
    real = module.add_parser

    def add_parser(sub):
        real(sub)
        error = cupy_memory.OutOfMemoryError(2**31, 2**34, 2**35)
        sub.choices[command].set_defaults(func=lambda args: (_ for _ in ()).throw(error))

    monkeypatch.setattr(module, "add_parser", add_parser)
    argv = [command] if command == "train" else [command, "--checkpoint", "x.npz"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "out of GPU memory (Out of memory allocating 2,147,483,648 bytes" in err[0]
    assert setting in err[0]


@pytest.mark.skipif(B.cupy_available(), reason="CuPy with a GPU is available here")
def test_the_python_api_refuses_an_unusable_backend_named_as_the_command_line_does(tmp_path):
    code = (
        "from scratchformer.engine.models import Transformer, TransformerConfig\n"
        "Transformer(TransformerConfig.preset('tiny', vocab_size=12))\n"
    )
    env = {**os.environ, "SCRATCHFORMER_BACKEND": "cupy"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert r.returncode == 1 and "BackendError: SCRATCHFORMER_BACKEND=cupy:" in r.stderr
