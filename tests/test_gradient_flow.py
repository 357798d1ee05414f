"""The gradient-flow example: per-layer hooks show vanishing gradients with a bad initialisation."""

import numpy as np

from tracegrad.examples import load


def test_hooks_show_vanishing_and_healthy_gradients():
    example = load("gradient-flow")
    numbers = example.run(backend="numpy", size=64, steps=5, quiet=True)
    small, xavier = numbers["ratios"].values()
    assert small < 0.01  # vanishing: layer 1 sees < 1% of layer 6's gradient
    assert 0.3 < xavier < 3.0  # healthy
    for result in numbers["results"].values():
        for norms in result["norms"].values():
            assert norms.shape == (5,) and np.all(np.isfinite(norms))  # one hook call per step
