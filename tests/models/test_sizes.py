"""A model's size before it is built: the parameter shapes read from the modules' own
declarations equal the built model's for every preset, attention variant and model
class; the totals hold for any number of layers, in a time that does not grow with
them; declaring allocates nothing; the activation estimate brackets the measured peak."""

import dataclasses
import tracemalloc

import numpy as np
import pytest

from scratchformer.engine import device
from scratchformer.engine.models import PRESETS, TransformerConfig, sizes
from scratchformer.engine.models.sizes import (
    activation_bytes,
    build_model,
    describe,
    largest_part,
    model_bytes,
    parameter_shapes,
    parameter_totals,
)
from scratchformer.engine.nn import ATTENTION_VARIANTS
from scratchformer.engine.nn.module import Declared, shapes_only

SPECS = {
    "Transformer": {"class": "Transformer"},
    "LanguageModel": {"class": "LanguageModel"},
    "EncoderClassifier": {"class": "EncoderClassifier", "num_classes": 5},
}


def built_shapes(spec, config) -> dict:
    return {k: tuple(p.shape) for k, p in build_model(spec, config).parameters().items()}


def variants():
    """Every attention variant, for each model class that takes it, and the options
    that change which parameters exist."""
    for kind, variant in sorted(ATTENTION_VARIANTS.items()):
        causal_only = variant.causal_only
        extra = {"encoder_attention": "dense"} if causal_only else {}
        for name in SPECS:
            if name == "EncoderClassifier" and causal_only:
                continue
            yield pytest.param(name, dict(attention=kind, **extra), id=f"{name}-{kind}")
    for opts in (
        dict(share_embeddings="decoder", src_vocab_size=17),
        dict(share_embeddings="none", src_vocab_size=19),
        dict(positions="learned"),
        dict(norm="pre"),
        dict(N=0, N_dec=2),
        dict(N_dec=3),
    ):
        yield pytest.param(
            "Transformer", opts, id="Transformer-" + "-".join(map(str, opts.values()))
        )


@pytest.mark.parametrize("name, opts", list(variants()))
def test_shapes_equal_the_built_models(name, opts):
    config = TransformerConfig.preset("tiny", vocab_size=23, **opts)
    assert parameter_shapes(SPECS[name], config) == built_shapes(SPECS[name], config)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_shapes_equal_the_built_models_of_every_preset(preset):
    """Each preset's widths with one layer per stack (the layers repeat: the totals'
    test below covers their count); the full presets are in the slow test."""
    config = TransformerConfig.preset(preset, vocab_size=31, N=1, N_dec=1)
    for spec in SPECS.values():
        assert parameter_shapes(spec, config) == built_shapes(spec, config)


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_shapes_and_totals_of_every_full_preset(preset):
    config = TransformerConfig.preset(preset, vocab_size=37000)
    spec = SPECS["Transformer"]
    shapes = built_shapes(spec, config)
    assert parameter_shapes(spec, config) == shapes
    assert parameter_totals(spec, config) == (len(shapes), sum(map(np.prod, shapes.values())))


@pytest.mark.parametrize(
    "name, n, n_dec",
    [(name, n, d) for name in SPECS for n, d in [(1, 1), (3, 2), (5, 7)]] + [("Transformer", 0, 1)],
)
def test_totals_hold_for_any_number_of_layers(name, n, n_dec):
    config = TransformerConfig.preset("tiny", vocab_size=23, N=n, N_dec=n_dec)
    config = dataclasses.replace(config, attention="relative")
    shapes = built_shapes(SPECS[name], config)
    want = (len(shapes), int(sum(np.prod(s) for s in shapes.values())))
    assert parameter_totals(SPECS[name], config) == want


def test_declaring_a_huge_model_allocates_nothing():
    """The big preset with 200 layers per stack, 10^6 learned positions and a vocabulary
    of 10^6: 3 * 10^9 parameters declared in under 10 MB (no array is made: shapes only;
    measured in memory, which a busy machine does not change, not in seconds)."""
    config = TransformerConfig.preset(
        "big", vocab_size=10**6, N=200, positions="learned", max_len=10**6
    )
    tracemalloc.start()
    with shapes_only():
        model = build_model(SPECS["Transformer"], config)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    params = model.parameters()
    assert all(isinstance(p, Declared) for p in params.values())
    assert model.encoder.pos.params["P"].shape == (10**6, 1024)
    assert peak < 10e6, peak


def test_totals_of_a_hundred_thousand_layers_take_no_time(monkeypatch):
    """Against the names and shapes declared with 10 and 11 layers per stack, counted.
    No time: the shapes are read with at most 2 layers a stack, whatever N (counted in
    the layers read, which a busy machine does not change, not in seconds)."""
    spec = SPECS["Transformer"]
    config = TransformerConfig.preset("base", vocab_size=37000, N=100_000)
    read = []
    real = sizes.parameter_shapes

    def spy(spec, config):
        read.append((config.N, config.N_dec))
        return real(spec, config)

    monkeypatch.setattr(sizes, "parameter_shapes", spy)
    tensors, entries = parameter_totals(spec, config)
    monkeypatch.undo()
    assert read and max(max(n) for n in read) <= 2, read

    def counted(n):
        shapes = parameter_shapes(spec, dataclasses.replace(config, N=n, N_dec=n))
        return len(shapes), int(sum(np.prod(s) for s in shapes.values()))

    (t10, e10), (t11, e11) = counted(10), counted(11)
    assert (tensors, entries) == (t10 + 99_990 * (t11 - t10), e10 + 99_990 * (e11 - e10))
    assert largest_part(spec, config) == "layers"
    assert "N 100000 + 100000" in describe(spec, config)
    assert model_bytes(spec, config) >= 2 * 4 * entries


@pytest.mark.parametrize(
    "name, opts, B, L",
    [
        ("Transformer", dict(vocab_size=3000, N=2, d_model=128, d_ff=512, h=4), 32, 48),
        (
            "Transformer",
            dict(vocab_size=100, N=2, d_model=64, d_ff=256, h=4, P_drop_attn=0.1),
            8,
            120,
        ),
        ("LanguageModel", dict(vocab_size=100, N=2, d_model=64, d_ff=256, h=4), 8, 200),
        ("EncoderClassifier", dict(vocab_size=3000, N=2, d_model=64, d_ff=256, h=4), 32, 60),
    ],
)
def test_the_activation_estimate_brackets_the_measured_peak(name, opts, B, L):
    """tracemalloc's peak of one forward and backward (NumPy allocations are traced),
    against the estimate for the same length: above it, by at most a half."""
    config = TransformerConfig(max_len=256, **opts)
    model = build_model(SPECS[name], config)
    model.flatten()
    rng = np.random.default_rng(0)
    ids = rng.integers(3, config.vocab_size, (B, L))
    args = {
        "Transformer": (ids, ids, ids),
        "LanguageModel": (ids, ids),
        "EncoderClassifier": (ids, rng.integers(0, 5, B)),
    }[name]
    tracemalloc.start()
    loss, cache = model.loss_forward(*args, rng=device.generator(0))
    model.loss_backward(cache)
    del cache
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    estimate = activation_bytes(SPECS[name], config, B * L, length=L)
    assert peak <= estimate <= 1.5 * peak, (estimate / 1e6, peak / 1e6)
