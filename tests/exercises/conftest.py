"""The exercises' tests. A learner's code is stopped after ``isolate.DEFAULT_LIMIT``
seconds (10) of one check; on a busy machine a reference solution's check can take
longer than that, and a test would then see "ran past the time limit". So every test
here gives a check ten minutes unless it sets ``--time-limit`` itself (the limit is
tested with one second, on an endless loop)."""

import pytest

from scratchformer.exercises import isolate


@pytest.fixture(autouse=True)
def checks_are_not_timed(monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_LIMIT", 600.0)
