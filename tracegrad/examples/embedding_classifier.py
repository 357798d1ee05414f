"""A bag-of-words text classifier: an embedding table indexed by token ids (a gather whose
gradient is a scatter-add), mean pooling, a linear layer and a log-sum-exp cross-entropy with
label smoothing built by an in-place masked write, all in plain NumPy, trained with tg.value_and_grad.

    python3 -m tracegrad run embedding-classifier --steps 200
"""

from __future__ import annotations

import sys

import numpy as np

import tracegrad as tg
from tracegrad.examples._common import (
    Printer,
    Progress,
    check_positive,
    header,
    no_plot,
    resolve_backend,
)

NAME = "embedding-classifier"
DESCRIPTION = "token ids -> embedding table (gather) -> softmax classifier, label smoothing by in-place writes"
DEFAULT_SIZE = 600
SIZE_HELP = "training sentences"  # what --size means
DEFAULT_STEPS = 200
STEPS_HELP = "training steps"
PLOT = False

VOCABULARY, CLASSES, LENGTH, WIDTH = 60, 3, 8, 16
SMOOTHING = 0.1


def sentences(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sentences of token ids whose class shows in a few indicative tokens among common ones."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n)
    tokens = rng.integers(CLASSES * 5, VOCABULARY, (n, LENGTH))  # common words
    hints = rng.integers(0, 5, (n, 3)) + 5 * labels[:, None]  # 3 words of the class's own five
    tokens[:, :3] = hints
    return rng.permuted(tokens, axis=1), labels


def loss(params, tokens, onehot):
    """Cross-entropy against smoothed labels; `onehot` is a boolean (n, classes) array."""
    vectors = params["embedding"][tokens]  # (n, length, width): a gather by token id
    pooled = np.mean(vectors, axis=1)
    logits = pooled @ params["w"] + params["b"]
    top = np.max(logits, axis=1, keepdims=True)
    log_probs = logits - top - np.log(np.sum(np.exp(logits - top), axis=1, keepdims=True))
    target = np.full_like(logits, SMOOTHING / (CLASSES - 1))
    target[onehot] = 1.0 - SMOOTHING  # an in-place masked write on a traced array
    return -np.mean(np.sum(target * log_probs, axis=1))


def predict(params, tokens):
    pooled = np.mean(params["embedding"][tokens], axis=1)
    return np.argmax(pooled @ params["w"] + params["b"], axis=1)


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Trains by gradient descent with momentum; returns the losses and the accuracies."""
    no_plot(NAME, plot)
    check_positive("size", size, 10)
    check_positive("steps", steps)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"embedding-classifier: {size} sentences of {LENGTH} tokens, vocabulary "
        f"{VOCABULARY}, {CLASSES} classes, embeddings of width {WIDTH}",
        name,
        backend,
    )
    tokens, labels = sentences(size, 0)
    test_tokens, test_labels = sentences(200, 1)
    onehot = labels[:, None] == np.arange(CLASSES)
    rng = np.random.default_rng(2)
    params = {
        "embedding": 0.1 * rng.normal(size=(VOCABULARY, WIDTH)),
        "w": 0.1 * rng.normal(size=(WIDTH, CLASSES)),
        "b": np.zeros(CLASSES),
    }
    step_fn = tg.value_and_grad(loss, backend=name)
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    progress = Progress(out, "training", steps, unit="step", label="loss", watch=(step_fn,))
    history = []
    for k in range(steps):
        value, grads = step_fn(params, tokens, onehot)
        history.append(float(value))
        for key in params:
            velocity[key] = 0.9 * velocity[key] - 2.0 * grads[key]
            params[key] = params[key] + velocity[key]
        progress.step(k + 1, value)
    progress.done()
    train = float(np.mean(predict(params, tokens) == labels))
    test = float(np.mean(predict(params, test_tokens) == test_labels))
    out(
        f"accuracy: train {train:.1%}, test {test:.1%} (chance {1 / CLASSES:.0%}); "
        f"loss {history[0]:.4f} -> {history[-1]:.4f}"
    )
    return {"backend": name, "history": history, "train_accuracy": train, "test_accuracy": test}


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
