"""Shared by the checkpoint fault tests: a real checkpoint to tamper with (made once)."""

import pytest
from task_data import TINY_RUN

from scratchformer.cli import main as cli_main


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """``checkpoint_2.npz`` of a two-step reverse run: parameters, Adam's moments, the
    training state, the tokenizer (10 symbols + 4 specials = vocab_size 14)."""
    run = tmp_path_factory.mktemp("good") / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "2"]
    assert cli_main([*argv, "--checkpoint-every", "2", "--eval-every", "100"]) == 0
    return run / "checkpoints" / "checkpoint_2.npz"
