"""The workloads whose generated source tests/test_golden.py keeps in tests/golden/.

Their source lines appear in the golden files (`[workloads.py:12]`): an edit here that moves a
line changes them; regenerate with `python3 tests/test_golden.py --update`.
"""

import numpy as np

import tracegrad as tg


def mlp_loss(w1, b1, w2, x, y):
    h = np.tanh(x @ w1 + b1)
    return np.mean((h @ w2 - y) ** 2)


def softmax_cross_entropy(w, x, onehot):
    logits = x @ w
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(onehot * log_probs, axis=1))


def reductions(x):
    centred = x - np.mean(x, axis=0)
    return np.max(x, axis=1), np.sum(centred**2, axis=0) / x.shape[0], np.min(np.abs(x))


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _args(*shapes):
    """Arguments of these shapes (their values do not change the generated source)."""
    return tuple(np.linspace(-1.0, 1.0, int(np.prod(s))).reshape(s) for s in shapes)


# name -> (transformed function, arguments)
WORKLOADS = {
    "mlp_loss_grad": (
        tg.grad(mlp_loss, argnums=(0, 1, 2)),
        _args((4, 8), (8,), (8, 1), (16, 4), (16, 1)),
    ),
    "softmax_cross_entropy_value_and_grad": (
        tg.value_and_grad(softmax_cross_entropy),
        _args((6, 3), (10, 6), (10, 3)),
    ),
    "reductions": (tg.jit(reductions), _args((12, 5))),
    "rosenbrock_hessian": (tg.hessian(rosenbrock), _args((5,))),
}
