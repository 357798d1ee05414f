"""The exceptions tracegrad raises at its users. Every message says what went wrong and how to fix it."""

from __future__ import annotations


class TracingError(TypeError):
    """User code did something that cannot be traced (branching on a traced value, an unsupported
    NumPy function, converting a traced value to a Python number...)."""


class ShapeError(ValueError):
    """Operand shapes are incompatible; the message names both shapes and the user's source line."""


class BackendError(ValueError):
    """An unknown backend name, or a backend that cannot run on this machine."""


class GradientCheckError(AssertionError):
    """`check_grad` found derivatives that disagree with finite differences."""


def at(source: str | None) -> str:
    """' (at file.py:12)' when the source is known, else ''."""
    return f" (at {source})" if source else ""
