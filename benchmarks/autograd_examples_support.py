"""Plain-NumPy stand-ins for the HIPS autograd helpers that autograd's examples import, and the
instrumentation that benchmarks/autograd_examples.py runs each example under.

The stand-ins are written from the helpers' documented behaviour (autograd's docstrings and
README), not from their code: the optimisers (`adam`, `sgd`, `rmsprop`: the published update
rules, parameters flattened to one vector and the callback given `(params, iteration, gradient)`),
`flatten` / `flatten_func` (leaves of nested lists, tuples and dicts, dict keys sorted, ravelled and
concatenated), `elementwise_grad` (the gradient of the output's sum), `hessian_vector_product`,
`check_grads` (tracegrad's own check), `primitive` / `defvjp` (a `tracegrad.custom_vjp`),
`fixed_point` (a `tracegrad.while_loop` with the implicit-function derivative) and the
`autograd.builtins.tuple` marker (a plain tuple). Only the tracegrad run imports them.

The instrumentation (`drive`, run as `python autograd_examples_support.py MODE SCRIPT STEPS OUT`)
is the same for both runs: it wraps the gradient makers (autograd's or tracegrad's `grad`,
`value_and_grad`, and the stand-ins above), records the first top-level gradient call, caps the
optimisers at STEPS iterations and `scipy.optimize.minimize` at STEPS `maxiter`, records the
objective after each optimiser run, makes plotting harmless, then writes a JSON report.
"""

from __future__ import annotations

import builtins
import inspect
import json
import os
import sys
import traceback

import numpy as np

# ---------------------------------------------------------------------------------------------
# Stand-ins (used by the tracegrad run only)
# ---------------------------------------------------------------------------------------------

_ORIGINAL: dict = {}  # tracegrad's own makers, kept before the instrumentation wraps them
tuple = builtins.tuple  # autograd.builtins.tuple marks a differentiable tuple


def _leaves(value, out):
    if isinstance(value, dict):
        for key in sorted(value):
            _leaves(value[key], out)
    elif isinstance(value, (list, builtins.tuple)):
        for item in value:
            _leaves(item, out)
    else:
        out.append(value)
    return out


def _rebuild(template, it):
    if isinstance(template, dict):
        return {key: _rebuild(template[key], it) for key in sorted(template)}
    if isinstance(template, list):
        return [_rebuild(item, it) for item in template]
    if isinstance(template, builtins.tuple):
        return builtins.tuple(_rebuild(item, it) for item in template)
    return next(it)


def flatten(value):
    """`(vector, unflatten)`: every leaf ravelled and concatenated, in a fixed order."""
    leaves = _leaves(value, [])
    shapes = [np.shape(leaf) for leaf in leaves]
    sizes = [int(np.prod(shape)) for shape in shapes]
    if leaves:
        flat = np.concatenate([np.ravel(leaf) for leaf in leaves])
    else:
        flat = np.zeros(0)

    def unflatten(vector):
        pieces, start = [], 0
        for shape, size in zip(shapes, sizes, strict=True):
            pieces.append(np.reshape(vector[start : start + size], shape))
            start += size
        return _rebuild(value, iter(pieces))

    return flat, unflatten


def flatten_func(func, example):
    """`(flat_func, unflatten, flat_example)`: `func` of the flattened first argument."""
    flat_example, unflatten = flatten(example)

    def flat_func(flat, *args, **kwargs):
        return func(unflatten(flat), *args, **kwargs)

    return flat_func, unflatten, flat_example


def _flat_optimizer(update):
    """Runs `update` on flattened parameters; calls `grad(params, i)` and `callback(params, i, g)`
    with the caller's structure, and returns the final parameters in it."""

    def optimizer(grad, x0, callback=None, num_iters=None, **kwargs):
        x, unflatten = flatten(x0)

        def flat_grad(x, i):
            return flatten(grad(unflatten(x), i))[0]

        def flat_callback(x, i, g):
            if callback is not None:
                callback(unflatten(x), i, unflatten(g))

        if num_iters is not None:
            kwargs["num_iters"] = num_iters
        return unflatten(update(flat_grad, x, flat_callback, **kwargs))

    optimizer.__name__ = update.__name__
    optimizer.__signature__ = inspect.signature(update)
    return optimizer


def _adam(grad, x, callback, num_iters=100, step_size=0.001, b1=0.9, b2=0.999, eps=1e-8):
    """Adam (Kingma and Ba 2015): bias-corrected first and second moment estimates."""
    m = np.zeros(len(x))
    v = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        callback(x, i, g)
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * (g**2) + b2 * v
        mhat = m / (1 - b1 ** (i + 1))
        vhat = v / (1 - b2 ** (i + 1))
        x = x - step_size * mhat / (np.sqrt(vhat) + eps)
    return x


def _sgd(grad, x, callback, num_iters=200, step_size=0.1, mass=0.9):
    """Stochastic gradient descent with momentum `mass`."""
    velocity = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        callback(x, i, g)
        velocity = mass * velocity - (1.0 - mass) * g
        x = x + step_size * velocity
    return x


def _rmsprop(grad, x, callback, num_iters=100, step_size=0.1, gamma=0.9, eps=1e-8):
    """RMSprop: steps scaled by a running root mean square of the gradient."""
    avg_sq_grad = np.ones(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        callback(x, i, g)
        avg_sq_grad = avg_sq_grad * gamma + g**2 * (1 - gamma)
        x = x - step_size * g / (np.sqrt(avg_sq_grad) + eps)
    return x


_adam.__name__, _sgd.__name__, _rmsprop.__name__ = "adam", "sgd", "rmsprop"
adam = _flat_optimizer(_adam)
sgd = _flat_optimizer(_sgd)
rmsprop = _flat_optimizer(_rmsprop)


def elementwise_grad(fun, argnum=0):
    """The gradient of `sum(fun(...))`: the derivative of each output element with respect to
    its own input element when `fun` acts elementwise."""
    import tracegrad

    grad = _ORIGINAL.get("grad", tracegrad.grad)
    return grad(lambda *args: np.sum(fun(*args)), argnums=argnum)


def hessian_vector_product(fun, argnum=0):
    """`(x, v) -> H(x) @ v`, the Hessian of scalar `fun` times `v`."""
    import tracegrad

    if argnum != 0:
        raise NotImplementedError("the stand-in takes argnum=0 only")
    return _ORIGINAL.get("hvp", tracegrad.hvp)(fun)


def check_grads(fun, modes=None, order=2):
    """`check_grads(fun, modes, order)(*args)`: tracegrad's finite-difference check."""
    import tracegrad

    return lambda *args: tracegrad.check_grad(fun, *args, order=order)


def primitive(fun):
    """A function whose reverse-mode rule `defvjp` gives."""
    import tracegrad

    return tracegrad.custom_vjp(fun)


def defvjp(prim, *vjpmakers):
    """`vjpmaker(ans, *args)` returns `g -> cotangent` for its argument (autograd's convention)."""

    def fwd(*args):
        ans = prim.fun(*args)
        return ans, (ans, args)

    def bwd(residuals, g):
        ans, args = residuals
        cts = []
        for i in range(len(args)):
            maker = vjpmakers[i] if i < len(vjpmakers) else None
            cts.append(None if maker is None else maker(ans, *args)(g))
        return builtins.tuple(cts)

    prim.defvjp(fwd, bwd)


def fixed_point(f, a, x0, distance, tol):
    """x* = f(a)(x*), iterating x <- f(a)(x) from x0 until distance(x, x_prev) < tol. Its
    derivative with respect to `a` is the implicit-function one: the adjoint w = g + (df/dx)^T w
    at x*, iterated from zero to the same tolerance, then (df/da)^T w. (A derivative of that
    rule, the second order, differentiates the adjoint iteration itself.)"""
    import tracegrad

    def iterate(fa, x, x_prev):
        def step(c):
            return fa(c[0]), c[0]

        return tracegrad.while_loop(lambda c: distance(c[0], c[1]) > tol, step, (x, x_prev))[0]

    @tracegrad.custom_vjp
    def solve(a, x0):
        return iterate(f(a), f(a)(x0), x0)

    def fwd(a, x0):
        x_star = solve(a, x0)
        return x_star, (a, x_star, x0)

    def bwd(residuals, g):
        a, x_star, x0 = residuals
        _, vjp_x = tracegrad.vjp(f(a), x_star)
        w0 = np.zeros_like(x_star)

        def adjoint(w):
            return vjp_x(w)[0] + g

        w = iterate(adjoint, adjoint(w0), w0)
        _, vjp_a = tracegrad.vjp(lambda a_: f(a_)(x_star), a)
        return vjp_a(w)[0], np.zeros_like(x0)

    solve.defvjp(fwd, bwd)
    return solve(a, x0)


# ---------------------------------------------------------------------------------------------
# Instrumentation (both runs)
# ---------------------------------------------------------------------------------------------

_PLAIN = (np.ndarray, np.generic, float, int, bool)


class StopExample(Exception):
    """Raised by the recorder to end an example after its capped number of gradient calls."""


class Recorder:
    def __init__(self, steps: int, stop_after_calls: int | None):
        self.steps = steps
        self.stop_after_calls = stop_after_calls
        self.first_grad = None
        self.top_calls = 0
        self.last_objective = None
        self.last_value = None
        self.losses: list = []
        self.loss_sources: list = []

    def on_call(self, fun, out, kind):
        leaves = _leaves(out, [])
        if not all(isinstance(leaf, _PLAIN) for leaf in leaves):
            return  # a call inside another transform's trace (a tracer or a box): not the user's
        self.top_calls += 1
        self.last_objective = fun
        if kind == "value_and_grad":
            self.last_value = out[0]
        if self.first_grad is None:
            self.first_grad = [np.asarray(leaf, dtype=float).tolist() for leaf in leaves]
        if self.stop_after_calls is not None and self.top_calls >= self.stop_after_calls:
            if kind == "value_and_grad":
                self.loss(out[0], f"value at gradient call {self.top_calls}")
            raise StopExample

    def loss(self, value, source):
        leaves = _leaves(value, [])
        self.losses.append([np.asarray(leaf, dtype=float).tolist() for leaf in leaves])
        self.loss_sources.append(source)


def _wrap_maker(rec: Recorder, maker, kind: str):
    def make(fun, *args, **kwargs):
        transformed = maker(fun, *args, **kwargs)

        def wrapped(*call_args, **call_kwargs):
            out = transformed(*call_args, **call_kwargs)
            rec.on_call(fun, out, kind)
            return out

        wrapped.__name__ = getattr(transformed, "__name__", kind)
        return wrapped

    return make


_DEFAULT_ITERS = {"adam": 100, "sgd": 200, "rmsprop": 100}  # the documented defaults


def _wrap_optimizer(rec: Recorder, optimizer):
    default = _DEFAULT_ITERS[optimizer.__name__]  # autograd's signature hides it (**kwargs)

    def run(grad, x0, callback=None, num_iters=default, **kwargs):
        cap = min(num_iters, rec.steps)
        result = optimizer(grad, x0, callback=callback, num_iters=cap, **kwargs)
        if rec.last_objective is not None:
            rec.loss(rec.last_objective(result, cap), f"{optimizer.__name__} objective after {cap}")
        return result

    return run


def _wrap_minimize(rec: Recorder, minimize):
    def run(fun, x0, *args, **kwargs):
        options = dict(kwargs.get("options") or {})
        options["maxiter"] = min(options.get("maxiter", rec.steps), rec.steps)
        kwargs["options"] = options
        result = minimize(fun, x0, *args, **kwargs)
        rec.loss(result.fun, f"minimize fun after maxiter {options['maxiter']}")
        return result

    return run


def _quiet_plots():
    os.environ["MPLBACKEND"] = "Agg"
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name in ("show", "pause", "ion", "draw"):
        setattr(plt, name, lambda *a, **k: None)


def _instrument(mode: str, rec: Recorder):
    if mode == "autograd":
        import autograd
        import autograd.misc.optimizers as optimizers

        makers = autograd
        names = {
            "grad": "grad",
            "value_and_grad": "value_and_grad",
            "elementwise_grad": "grad",
            "hessian_vector_product": "hvp",
        }
    else:
        import tracegrad

        makers = tracegrad
        optimizers = sys.modules[__name__]
        _ORIGINAL.update(grad=tracegrad.grad, hvp=tracegrad.hvp)
        names = {"grad": "grad", "value_and_grad": "value_and_grad"}
        for name, kind in (("elementwise_grad", "grad"), ("hessian_vector_product", "hvp")):
            setattr(optimizers, name, _wrap_maker(rec, getattr(optimizers, name), kind))
    for name, kind in names.items():
        setattr(makers, name, _wrap_maker(rec, getattr(makers, name), kind))
    for name in ("adam", "sgd", "rmsprop"):
        setattr(optimizers, name, _wrap_optimizer(rec, getattr(optimizers, name)))
    import scipy.optimize

    scipy.optimize.minimize = _wrap_minimize(rec, scipy.optimize.minimize)


def drive(mode: str, script: str, steps: int, out_path: str, final: str | None, stop: int | None):
    import runpy

    _quiet_plots()
    rec = Recorder(steps, stop)
    report: dict = {"error": None}
    folder = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, folder)
    os.chdir(folder)
    try:
        _instrument(mode, rec)
        np.random.seed(0)  # an example that draws without seeding draws the same in both runs
        try:
            env = runpy.run_path(script, run_name="__main__")
        except StopExample:
            env = None
        if final and env is not None:
            rec.loss(eval(final, env), f"final: {final}")
    except BaseException as exc:  # every failure is reported, none hidden
        lines = traceback.format_exception_only(type(exc), exc)
        report["error"] = "".join(lines).strip()
        report["traceback"] = traceback.format_exc()[-4000:]
    report["first_grad"] = rec.first_grad
    report["losses"] = rec.losses
    report["loss_sources"] = rec.loss_sources
    report["grad_calls"] = rec.top_calls
    with open(out_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    # The examples import this file by its name: drive that module, not this __main__ copy.
    import autograd_examples_support as support

    mode_arg, script_arg, steps_arg, out_arg = sys.argv[1:5]
    final_arg = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else None
    stop_arg = int(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[6] else None
    support.drive(mode_arg, script_arg, int(steps_arg), out_arg, final_arg, stop_arg)
