"""Shared by the fault tests: real checkpoints of tiny runs (made once per session), and
``refused``, the check of a one-line error."""

import pytest
from task_data import TINY_RUN

from scratchformer.app.cli import main as cli_main


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """``checkpoint_2.npz`` of a two-step reverse run: parameters, Adam's moments, the
    training state, the tokenizer (10 symbols + 4 specials = vocab_size 14)."""
    run = tmp_path_factory.mktemp("good") / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "2"]
    assert cli_main([*argv, "--checkpoint-every", "2", "--eval-every", "100"]) == 0
    return run / "checkpoints" / "checkpoint_2.npz"


@pytest.fixture(scope="session")
def lm_checkpoint(tmp_path_factory):
    """``final.npz`` of a few-step language model on three verses (``generate``'s)."""
    from task_data import write_monolingual

    root = tmp_path_factory.mktemp("lm")
    data = write_monolingual(root / "data")
    argv = ["train", "--task", "lm", "--data-dir", str(data / "web-text")]
    argv += ["--set", "model.preset=tiny"]
    argv += ["--run-dir", str(root / "run"), "--steps", "4", "--no-progress", "--no-test"]
    assert cli_main(argv) == 0
    return root / "run" / "checkpoints" / "final.npz"


@pytest.fixture(scope="session")
def translation_checkpoint(tmp_path_factory):
    """``final.npz`` of a small BPE translation model (``export``'s input)."""
    from task_data import train_translation

    return train_translation(tmp_path_factory.mktemp("translation"))


@pytest.fixture(scope="session")
def pairs_dir(tmp_path_factory):
    """``{train,dev,test}.tsv`` of a few short pairs (for ``evaluate --data-dir``)."""
    d = tmp_path_factory.mktemp("pairs")
    for split in ("train", "dev", "test"):
        (d / f"{split}.tsv").write_text("abc\tcba\nde\ted\nfghij\tjihgf\n", encoding="utf-8")
    return d


def one_line_error(capsys, argv, *fragments, code=2):
    """Run ``scratchformer argv``: it must end with ``code`` and exactly one line on
    stderr holding every fragment, and no traceback. Returns that line."""
    try:
        rc = cli_main(argv)
    except SystemExit as e:  # argparse refuses a command line by exiting
        rc = e.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == code and len(lines) == 1, (rc, err)
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


@pytest.fixture
def refused(capsys):
    """``refused(argv, *fragments)``: ``one_line_error`` with this test's captured output."""
    return lambda argv, *fragments, code=2: one_line_error(capsys, argv, *fragments, code=code)


@pytest.fixture(scope="session")
def reverse_model(tmp_path_factory):
    """A tiny reverse model trained a few dozen steps: ``(checkpoint, model, tokenizer)``.
    Checkpoints every 10 steps, so that the run has an average (of steps 50 and 60, the
    last 20%) beside its final model."""
    from scratchformer.app.checkpoint import load_with_tokenizer

    run = tmp_path_factory.mktemp("reverse") / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "60", "--no-test"]
    assert cli_main([*argv, "--checkpoint-every", "10"]) == 0
    ckpt = run / "checkpoints" / "final.npz"
    loaded, tok = load_with_tokenizer(ckpt)
    return ckpt, loaded.model, tok
