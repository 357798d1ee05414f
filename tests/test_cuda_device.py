"""The device side of the cuda backend (tracegrad/cuda/device.py): on the GPU, or on Numba's
CUDA simulator where there is none (tests/conftest.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import BACKENDS

import tracegrad as tg

pytestmark = pytest.mark.skipif("cuda" not in BACKENDS, reason="numba-cuda is not installed")


def test_programs_called_from_several_threads_at_once():
    """Host threads that run cuda programs at the same time each get their own right answer
    (the simulator's kernel context is global: its launches once ran each other's kernels on
    the host thread and failed with "'Thread' object has no attribute 'blockIdx'")."""
    jit = tg.jit(lambda x: np.sin(x) * 2.0 + x, backend="cuda")
    vg = tg.value_and_grad(lambda x: np.sum(np.tanh(x) ** 2), backend="cuda")
    errors: list[str] = []
    barrier = threading.Barrier(6)

    def work(k: int) -> None:
        x = np.linspace(-1.0, 1.0, 7) + k
        try:
            barrier.wait()
            for _ in range(4):
                if k % 2:
                    value, grad = vg(x)
                    np.testing.assert_allclose(value, np.sum(np.tanh(x) ** 2), rtol=1e-12)
                    t = np.tanh(x)
                    np.testing.assert_allclose(grad, 2 * t * (1 - t * t), rtol=1e-12)
                else:
                    np.testing.assert_allclose(jit(x), np.sin(x) * 2.0 + x, rtol=1e-12)
        except Exception as exc:
            errors.append(f"thread {k}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
