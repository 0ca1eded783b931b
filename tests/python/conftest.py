import numpy as np
import pytest


@pytest.fixture
def rng():
    """A seeded generator: random, non-zero, reproducible test data."""
    return np.random.default_rng(20261122)


def nonzero(rng, shape, dtype=np.float32, low=0.1, high=2.0):
    """Uniform magnitudes in [low, high) with random signs: never zero."""
    mag = rng.uniform(low, high, size=shape)
    sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(dtype)
