"""The device primitives: segment sums (repeated indices add up, the same bits on every
run, a float64 sum within rounding for any order of the rows) and the counter-based
generator (its draws depend on the seed and the count alone; a fork replays them)."""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.device.counter import CounterGenerator, mix, mix_host

pytestmark = pytest.mark.usefixtures("backend")


# -- segment sums ---------------------------------------------------------------------------
def test_repeated_indices_add_up():
    """out[idx] += v keeps one of the repeated rows; a segment sum keeps them all, and
    scatter_add adds them into what is there."""
    idx = B.asarray(np.array([3, 1, 3, 3, 0]))
    vals = B.asarray(np.arange(10, dtype=np.float64).reshape(5, 2))
    expected = np.zeros((5, 2))
    np.add.at(expected, [3, 1, 3, 3, 0], np.arange(10.0).reshape(5, 2))
    np.testing.assert_array_equal(B.asnumpy(device.segment_sum(idx, vals, 5)), expected)
    target = B.asarray(np.ones((5, 2)))
    device.scatter_add(target, idx, vals)
    np.testing.assert_array_equal(B.asnumpy(target), expected + 1)


def test_no_rows_give_zeros():
    out = device.segment_sum(B.asarray(np.zeros(0, np.int64)), B.asarray(np.zeros((0, 2))), 3)
    np.testing.assert_array_equal(B.asnumpy(out), np.zeros((3, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_same_bits_every_run_and_a_float64_sum_within_rounding(dtype):
    """Many repeats of a few ids (an embedding gradient's worst case): ten runs give the
    same bits; any permutation of the rows gives a float64-exact sum within rounding."""
    r = np.random.default_rng(0)
    N, K, D = 600, 40, 7
    ids = r.integers(0, K, N)
    ids[:200] = 3
    vals = r.standard_normal((N, D)) * np.exp(r.uniform(-3, 3, (N, 1)))
    exact = np.zeros((K, D))
    np.add.at(exact, ids, vals)  # float64 reference
    first = B.asnumpy(device.segment_sum(B.asarray(ids), B.asarray(vals.astype(dtype)), K))
    for _ in range(10):
        again = device.segment_sum(B.asarray(ids), B.asarray(vals.astype(dtype)), K)
        assert np.array_equal(B.asnumpy(again), first)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for seed in range(3):
        p = np.random.default_rng(seed).permutation(N)
        got = device.segment_sum(B.asarray(ids[p]), B.asarray(vals[p].astype(dtype)), K)
        err = np.abs(B.asnumpy(got) - exact).max() / np.abs(exact).max()
        assert err < tol, err


@pytest.mark.parametrize("K", [30, 5000])  # mostly long runs / mostly single rows
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_host_form_gives_the_gpu_form_bits(dtype, K):
    """NumPy compacts the runs (its sizes depend on the data, free on the host); the form
    written for the GPU keeps every row. The same reduceat slices: the same bits."""
    from scratchformer.engine.device import numpy_device, segment

    r = np.random.default_rng(1)
    ids = r.integers(0, K, 500)
    ids[100:250] = 0  # a long run, as a padded batch has
    vals = (r.standard_normal((500, 9)) * np.exp(r.uniform(-4, 4, (500, 1)))).astype(dtype)
    start = r.standard_normal((K, 9)).astype(dtype)
    host, gpu_form = start.copy(), start.copy()
    numpy_device.scatter_add(host, ids, vals)
    segment.scatter_add(gpu_form, ids, vals)
    assert np.array_equal(host, gpu_form)


# -- the counter-based generator ---------------------------------------------------------------
def test_mix_is_the_same_on_the_host_and_on_arrays():
    words = [0, 1, 2**63 + 5, 2**64 - 1, 0x9E3779B97F4A7C15]
    got = B.asnumpy(mix(B.asarray(np.array(words, dtype=np.uint64))))
    assert [int(w) for w in got] == [mix_host(w) for w in words]


def test_draws_depend_on_the_seed_and_the_count_alone():
    """Two generators of one seed draw the same numbers however the draws are cut into
    calls; another seed draws others; a fork continues the stream."""
    a, b = CounterGenerator(7), CounterGenerator(7)
    whole = B.asnumpy(a.random((4, 5), dtype=np.float64))
    parts = [B.asnumpy(b.random(n, dtype=np.float64)) for n in (3, 9, 8)]
    np.testing.assert_array_equal(whole.reshape(-1), np.concatenate(parts))
    assert not np.array_equal(whole, B.asnumpy(CounterGenerator(8).random((4, 5))))
    fork = a.fork()
    np.testing.assert_array_equal(B.asnumpy(a.random(6)), B.asnumpy(fork.random(6)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_floats_in_the_unit_interval(dtype):
    x = B.asnumpy(CounterGenerator(1).random(200_000, dtype=dtype))
    assert x.dtype == dtype and x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.005 and abs(x.var() - 1 / 12) < 0.002
    assert abs((x < 0.1).mean() - 0.1) < 0.003  # a dropout mask keeps what it should
    # neighbouring draws are not correlated
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.01


def test_a_scalar_integer_is_drawn_on_the_host():
    g = CounterGenerator(3)
    seed = g.integers(0, 2**62)
    assert isinstance(seed, int) and 0 <= seed < 2**62
    arr = g.integers(2, 9, size=(1000,))
    assert B.asnumpy(arr).min() >= 2 and B.asnumpy(arr).max() < 9


def test_the_numpy_default_is_pcg64_and_the_counter_generator_is_asked_for():
    gen = device.generator(5)
    if B.backend_name() == "numpy":
        assert isinstance(gen, np.random.Generator)
    else:
        assert isinstance(gen, CounterGenerator)
    assert isinstance(device.generator(5, counter=True), CounterGenerator)


def test_a_fork_of_numpys_generator_replays_it_without_seeding():
    g = device.generator(11)
    g.random(5)
    f = device.fork(g)
    np.testing.assert_array_equal(B.asnumpy(g.random(7)), B.asnumpy(f.random(7)))


def test_generators_are_made_once_not_per_attention_block_or_check_evaluation(monkeypatch):
    """Memory-efficient attention replays its block masks from a fork of the generator,
    a gradient check its evaluations' masks from forks of one generator: no generator is
    made per block or per evaluation (on CuPy each would be work; on any device, a fork is
    a copy of a state)."""
    from scratchformer.engine.gradcheck import check_model
    from scratchformer.engine.models import Transformer, TransformerConfig
    from scratchformer.engine.nn.attention import MultiHeadAttention

    made = []
    original = device.generator
    monkeypatch.setattr(device, "generator", lambda *a, **k: made.append(a) or original(*a, **k))
    r = np.random.default_rng(0)
    Q = B.asarray(r.standard_normal((2, 2, 13, 4)))
    mha = MultiHeadAttention(8, 2, P_drop_attn=0.3, rng=B.host_rng(0))
    mha.attention_block = 4
    O, cache = mha.attend(Q, Q, Q, None, original(5))
    mha.attend_backward(B.asarray(r.standard_normal(O.shape)), cache)
    assert made == []  # 4 blocks, forward and backward: nothing made
    cfg = TransformerConfig.preset("tiny", vocab_size=11, N=1)
    src = B.asarray(np.array([[3, 4, 5], [6, 7, 0]]))
    rep = check_model(Transformer(cfg), src, src, src, rng=3, max_entries=3)
    assert rep.passed and len(made) == 1  # one generator for every evaluation


def test_a_generator_of_another_backend_is_refused_in_one_line(monkeypatch):
    """On CuPy a NumPy generator's host masks cannot multiply device arrays: the model
    refuses it where it enters, naming what to use (checked here by pretending the
    backend is CuPy: the check reads only the names)."""
    from scratchformer.engine.models import Transformer, TransformerConfig

    device.check_generator(np.random.default_rng(0))  # NumPy's, on NumPy: fine
    device.check_generator(CounterGenerator(0))  # the counter-based one: on any backend
    monkeypatch.setitem(B._state, "name", "cupy")
    with pytest.raises(ValueError, match=r"rng is a numpy generator but the backend is cupy"):
        device.check_generator(np.random.default_rng(0))
    monkeypatch.setitem(B._state, "name", "numpy")
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=9))
    ids = np.array([[3, 4]])
    m.loss_forward(ids, ids, ids, rng=np.random.default_rng(0))
