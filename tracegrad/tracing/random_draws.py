"""Random numbers drawn inside a traced function: each draw becomes a `random` node (see
primitive_table/random.py) that draws from the same generator object when the program runs.

While a function is traced, every generator it reaches by name (a global, a closure variable, an
attribute of an object it reaches, a static argument) is replaced where it lives by a
`GeneratorStandIn`, and NumPy's global functions (np.random.normal...) by stand-ins that draw from
the global generator; both are put back when the trace ends. A stand-in's draw methods record a
node instead of drawing: its shape and dtype come from the same call on a copy of the generator
(which also checks the arguments as NumPy does). Outside a trace (another thread) a stand-in
passes every call to its generator. Traces that install stand-ins take one lock, so two threads
never install them over each other.

What cannot be recorded is refused: a draw with traced parameters (but `normal`, lowered to
loc + scale * standard_normal, as NumPy computes it), a draw inside tg.vmap, in-place shuffles,
reseeding, and (found after the trace, by the generator's changed state: reads.py) any other
call that advanced a generator.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any

import numpy as np

from .. import ir
from .. import primitives as P
from ..base.errors import TracingError
from ..trace import CallArgs, Tracer, traced_call
from .dispatch import provides
from .reads import (
    check_random_sources,
    generator_types,
    global_random,
    snapshot_random_sources,
)
from .guards import parent_and_step, read_step, write_step
from .scope import Scope

# the methods of Generator and RandomState (and NumPy's global functions) a trace records
DRAWS = frozenset(
    {
        "beta",
        "binomial",
        "chisquare",
        "choice",
        "dirichlet",
        "exponential",
        "f",
        "gamma",
        "geometric",
        "gumbel",
        "hypergeometric",
        "integers",
        "laplace",
        "logistic",
        "lognormal",
        "logseries",
        "multinomial",
        "multivariate_normal",
        "negative_binomial",
        "noncentral_chisquare",
        "noncentral_f",
        "normal",
        "pareto",
        "permutation",
        "poisson",
        "power",
        "rand",
        "randint",
        "randn",
        "random",
        "random_integers",
        "random_sample",
        "ranf",
        "rayleigh",
        "sample",
        "standard_cauchy",
        "standard_exponential",
        "standard_gamma",
        "standard_normal",
        "standard_t",
        "triangular",
        "uniform",
        "vonmises",
        "wald",
        "weibull",
        "zipf",
    }
)

# calls that change a generator in a way a program cannot replay
_REFUSED = {
    "shuffle": "shuffles its argument in place; use x[rng.permutation(len(x))] instead",
    "permuted": "permutes its argument (in place with out=); use rng.permutation instead",
    "seed": "reseeds the generator; seed it outside the function",
    "set_state": "sets the generator's state; set it outside the function",
    "bytes": "returns bytes, not an array",
}

_VMAP = "vmap"  # what a vmap trace's `no_branching` reason names (api_transforms.py)

_LOCK = threading.RLock()
_passed_on: set[int] = set()  # id() of the generators other threads drew from through stand-ins


class GeneratorStandIn:
    """Stands for `generator` where the traced function reaches it: its draws, while this thread
    traces, record `random` nodes; everything else is the generator's own."""

    __slots__ = ("__weakref__", "_tracegrad_generator")

    def __init__(self, generator: Any):
        object.__setattr__(self, "_tracegrad_generator", generator)

    def __getattr__(self, name: str) -> Any:
        generator = object.__getattribute__(self, "_tracegrad_generator")
        if ir.active_builder() is not None:
            if name in DRAWS:
                return functools.partial(draw, generator, name)
            if name in _REFUSED:
                raise TracingError(
                    f"{type(generator).__name__}.{name} inside a traced function: it "
                    f"{_REFUSED[name]}"
                )
        else:
            _passed_on.add(id(generator))
        return getattr(generator, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_tracegrad_generator"), name, value)

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_tracegrad_generator"))


def _global_function(name: str, original: Any):
    """np.random.<name> while a trace is installed: a draw from the global generator when this
    thread traces, else NumPy's own function."""

    @functools.wraps(original)
    def stand_in(*args, **kwargs):
        if ir.active_builder() is None:
            _passed_on.add(id(np.random.mtrand._rand))
            return original(*args, **kwargs)
        if name == "default_rng":
            return _default_rng(original, *args, **kwargs)
        if name in _REFUSED:
            raise TracingError(f"np.random.{name} inside a traced function: it {_REFUSED[name]}")
        return draw(np.random.mtrand._rand, name, *args, **kwargs)

    return stand_in


def _default_rng(original: Any, seed: Any = None) -> Any:
    """np.random.default_rng(...) called while tracing. With a seed, the generator is made now:
    each call makes it anew from that seed, so the numbers it gives are constants of the program.
    Without one, a fresh generator is made now and held by the program, which draws new numbers
    from it on every call (NumPy's own fresh generator would give numbers nobody can predict)."""
    if seed is not None:
        return original(seed)
    return GeneratorStandIn(original())


def _traced(value: Any) -> bool:
    if isinstance(value, Tracer):
        return True
    if isinstance(value, np.ndarray) and hasattr(value, "_tracegrad_current"):
        return isinstance(value._tracegrad_current(), Tracer)  # a fillable.Fillable
    if isinstance(value, (list, tuple)):
        return any(_traced(v) for v in value)
    return False


def _inside_vmap(builder: Any) -> bool:
    while builder is not None:
        if _VMAP in (builder.no_branching or ""):
            return True
        builder = builder.parent
    return False


def _frozen(value: Any) -> Any:
    """An argument as the program keeps it: arrays copied (a later change to the user's array
    is seen by the program's guards, which trace again), containers of them too."""
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, list):
        return [_frozen(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_frozen(v) for v in value)
    return value


def draw(generator: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """`generator.method(*args, **kwargs)` called while tracing: a `random` node."""
    builder = ir.active_builder()
    what = f"{type(generator).__name__}.{method}"
    if _inside_vmap(builder):
        raise TracingError(
            f"{what} inside tg.vmap: the plain function would draw new numbers for every "
            "example, the batched program only once. Draw the numbers for the whole batch "
            "outside (size=(batch, ...)) and pass them in as a mapped argument."
        )
    if _traced([*args, *kwargs.values()]):
        if method == "normal":
            return _traced_normal(generator, *args, **kwargs)
        if method in ("permutation", "choice") and _traced_population(args, kwargs):
            # NumPy draws the indices of a population as it draws those of an arange of its
            # length, then takes them: x[permutation(len(x))], a[choice(len(a), ...)]
            population = args[0]
            index = draw(generator, method, population.shape[0], *args[1:], **kwargs)
            return population[index]
        raise TracingError(
            f"{what} with a traced parameter: the parameters of a draw must be constants "
            "(Python or NumPy numbers and arrays). Draw a standard variate and transform it "
            "(mu + sigma * rng.standard_normal(size), low + (high - low) * rng.random(size)), "
            "or use rng.normal(mu, sigma), whose traced parameters tracegrad lowers so (and "
            "rng.permutation(x), rng.choice(a, ...) of a traced x or a, which take drawn indices)."
        )
    args, kwargs = _frozen(args), {k: _frozen(v) for k, v in kwargs.items()}
    import copy  # here: a first trace that draws nothing does not import it

    # the shape, the dtype and NumPy's own argument checks, from a copy of the generator
    sample = np.asarray(getattr(copy.deepcopy(generator), method)(*args, **kwargs))
    if sample.dtype.kind not in "fiub":
        raise TracingError(f"{what} returned {sample.dtype} values; tracegrad traces numbers only")
    record = P.Draw(generator, method, args, kwargs)
    return traced_call(
        lambda: P.emit(P.random_p, draw=record, shape=sample.shape, dtype=sample.dtype)
    )


def _traced_population(args: tuple, kwargs: dict) -> bool:
    """permutation(x) or choice(a, ...) with only the population traced (along axis 0)."""
    return (
        bool(args)
        and isinstance(args[0], Tracer)
        and args[0].ndim >= 1
        and not _traced([*args[1:], *kwargs.values()])
        and kwargs.get("axis", 0) == 0
    )


def _traced_normal(generator: Any, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
    """normal(loc, scale) with traced parameters: loc + scale * standard_normal(shape), drawn in
    the order NumPy draws (it computes each number as loc + scale * a standard normal). A
    negative traced scale is not refused (NumPy refuses a negative constant one)."""
    shapes = [np.shape(loc), np.shape(scale)]
    if size is None:
        shape = np.broadcast_shapes(*shapes)
    else:
        shape = (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)
        if np.broadcast_shapes(shape, *shapes) != shape:
            raise ValueError(
                f"normal: loc of shape {shapes[0]} and scale of shape {shapes[1]} do not "
                f"broadcast to size {shape}"
            )
    return loc + scale * draw(generator, "standard_normal", size=shape)


# ----------------------------------------------------------------------------------------------
# Installing the stand-ins for one trace


@provides("random_draws")
@contextlib.contextmanager
def recording(scope: Any, fun: Any, call: Any):
    """While the body traces `fun` (whose reach `scope` holds), the generators it reaches draw
    through stand-ins; yields the call's arguments (a static generator argument: its stand-in).
    A top-level trace without a scope (tg.make_ir) walks the function here."""
    if scope is None and ir.current_builder().parent is None:
        args = call.args if type(call) is CallArgs else call
        types = generator_types()
        scope = Scope.of(fun, tuple(a for a in args if types and isinstance(a, types)))
    if scope is None or not (scope.random_sources() or scope.rng_constructors):
        yield call
        return
    snapshot = snapshot_random_sources(scope)
    sources = list(scope.generator_paths)
    uses_global = "random" in scope.names or any(g is global_random() for _, g in sources)
    with _LOCK:
        undo: list[tuple[Any, tuple[str, Any], Any]] = []
        static: dict[int, GeneratorStandIn] = {}  # id(generator) -> stand-in for static args
        try:
            for path, generator in sources:
                _install(path, generator, scope.roots, undo, static)
            for path in scope.rng_constructors:  # from numpy.random import default_rng
                _install_default_rng(path, scope.roots, undo)
            if uses_global:
                module = np.random
                for name in sorted(DRAWS | {"default_rng"} | set(_REFUSED)):
                    original = module.__dict__.get(name)
                    if original is None or getattr(original, "__wrapped__", None) is not None:
                        continue
                    step = ("attr", name)
                    undo.append((module, step, original))
                    write_step(module, step, _global_function(name, original))
            _passed_on.clear()
            yield _with_stand_ins(call, static)
        finally:
            for parent, step, original in reversed(undo):
                write_step(parent, step, original)
        # another thread's draws through a stand-in were its own (passed on, not recorded)
        unrecorded = [s for s in snapshot if id(s[1]) not in _passed_on]
        check_random_sources(unrecorded, getattr(fun, "__qualname__", "the traced function"), "")


def _install(path: Any, generator: Any, roots: tuple, undo: list, static: dict) -> None:
    if not path.steps:  # a static argument: the call passes the stand-in (trace.py)
        static.setdefault(id(generator), GeneratorStandIn(generator))
        return
    method = None
    if path.steps[-1] == ("attr", "__self__"):  # a bound method: from numpy.random import normal
        holder = type(path)(path.root, path.root_index, path.steps[:-1])
        method, path = holder.read(*roots), holder
        if not path.steps:
            return
    try:
        parent, step = parent_and_step(path, roots)
        current = read_step(parent, step)
        if type(current) is GeneratorStandIn or getattr(current, "__wrapped__", None) is not None:
            return  # an enclosing trace of this thread installed it
        stand_in = GeneratorStandIn(generator)
        if method is not None:
            name = getattr(method, "__name__", "")
            if name not in DRAWS and name not in _REFUSED:
                return
            value = _method_stand_in(stand_in, name, method)
        else:
            value = stand_in
        write_step(parent, step, value)
    except Exception:  # a tuple item, a property, a frozen object: not replaced (reads.py)
        return
    undo.append((parent, step, current))


def _install_default_rng(path: Any, roots: tuple, undo: list) -> None:
    """NumPy's default_rng reached by another name (a global `default_rng`): replaced, for the
    trace, by the stand-in np.random.default_rng gets (an unseeded call draws on every call)."""
    try:
        parent, step = parent_and_step(path, roots)
        current = read_step(parent, step)
        if getattr(current, "__wrapped__", None) is not None:
            return  # an enclosing trace of this thread installed it
        write_step(parent, step, _global_function("default_rng", current))
    except Exception:  # a tuple item, a frozen object: not replaced (the numbers are baked)
        return
    undo.append((parent, step, current))


def _method_stand_in(stand_in: GeneratorStandIn, name: str, method: Any):
    @functools.wraps(method)
    def call(*args, **kwargs):
        return getattr(stand_in, name)(*args, **kwargs)

    return call


def _with_stand_ins(call: Any, static: dict) -> Any:
    """The call's arguments, with the stand-in for each generator passed as a static argument."""
    if not static:
        return call
    if type(call) is CallArgs:
        return CallArgs(_with_stand_ins(call.args, static), call.kwargs)
    return tuple(static.get(id(a), a) for a in call)
