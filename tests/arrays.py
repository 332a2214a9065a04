"""Random arrays for the numeric tests, on the active backend (the ``backend`` fixture
switches it), one definition for every test file."""

import numpy as np

from scratchformer.engine import backend as B


def randn(seed, *shape, dtype=np.float64, scale=1.0):
    """Normal entries of standard deviation ``scale`` (unit scale by default: no gradient
    hides behind tiny values), float64 unless told otherwise."""
    return B.asarray((scale * np.random.default_rng(seed).standard_normal(shape)).astype(dtype))
