"""``device.parallel``: ranges on the host's worker threads, the same bits as one range.

The elementwise passes that split into ranges (Adam's blocks, the loss's rows) must give
the same numbers whatever the number of threads: a training step with 1 and 2 workers,
from the same weights and batch, leaves the same weights, moments and loss bit for bit.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from scratchformer import device
from scratchformer.models import Transformer, TransformerConfig
from scratchformer.optim import Adam


@pytest.fixture
def two_workers():
    with device.host_workers(2):
        yield


def test_ranges_cover_everything_once_in_multiples_of_the_grain(two_workers):
    seen, lock = [], threading.Lock()

    def fn(a, b):
        with lock:
            seen.append((a, b, threading.get_ident()))

    device.parallel(fn, 1000, grain=64)
    ranges = sorted((a, b) for a, b, _ in seen)
    assert ranges[0][0] == 0 and ranges[-1][1] == 1000
    assert all(b == a2 for (_, b), (a2, _) in zip(ranges, ranges[1:]))
    assert all(a % 64 == 0 for a, _ in ranges) and len(ranges) == 2
    assert len({t for *_, t in seen}) == 2  # the second range on another thread


def test_one_worker_or_too_little_work_is_one_call_here():
    calls = []
    device.parallel(lambda a, b: calls.append((a, b, threading.get_ident())), 1000, grain=64)
    with device.host_workers(2):
        device.parallel(lambda a, b: calls.append((a, b, threading.get_ident())), 100, grain=64)
    assert [c[:2] for c in calls] == [(0, 1000), (0, 100)]
    assert {c[2] for c in calls} == {threading.get_ident()}


def test_host_workers_restores_the_number_before():
    assert device.workers() == 1
    with device.host_workers(3):
        assert device.workers() == 3
    assert device.workers() == 1


def _step(workers: int):
    cfg = TransformerConfig.preset("tiny", vocab_size=6000)
    model = Transformer(cfg)
    opt = Adam(model.flatten(), 0.9, 0.98, 1e-9)
    r = np.random.default_rng(0)
    src, tgt = r.integers(4, 6000, (8, 12)), r.integers(4, 6000, (8, 12))
    with device.host_workers(workers):
        for _ in range(2):
            model.zero_grad()
            loss, cache = model.loss_forward(src, tgt, tgt, rng=device.generator(1))
            model.loss_backward(cache)
            opt.step(1e-3)
    return float(loss), opt.flat.params.copy(), opt.m.copy(), opt.v.copy()


def test_a_training_step_is_the_same_bits_with_two_workers():
    one, two = _step(1), _step(2)
    assert one[0] == two[0]
    for a, b, what in zip(one[1:], two[1:], ("theta", "m", "v")):
        assert np.array_equal(a, b), what
