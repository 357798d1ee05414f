"""autograd.util: the deprecated `quick_grad_check`."""

from __future__ import annotations

import warnings

from .test_util import check_grads


def quick_grad_check(fun, arg0, extra_args=(), kwargs=None, verbose=True, **unused):
    warnings.warn(
        "quick_grad_check is deprecated; use autograd.test_util.check_grads", stacklevel=2
    )
    check_grads(fun, modes=["rev"], order=1)(arg0, *extra_args, **(kwargs or {}))
