"""The public transforms: grad, value_and_grad, jacobian, hessian, jit, make_ir, stop_gradient.

Every transform is a `Transformed` callable (calls/transformed.py). Called on arrays, it traces the function once per
argument signature (shapes, dtypes, static arguments, tree structure), derives the graph it needs,
optimises it, compiles it for a backend and caches the program. Called inside another trace (on
tracers), it derives the same graph and inlines it into the enclosing trace: that is how
transforms compose (grad of grad, jit of grad, hessian = jacobian of grad).
"""

from __future__ import annotations

from collections.abc import Callable

from .runtime import backends
from . import primitives as P
from .calls.arguments import as_array, leaf_names
from .calls.transformed import Transformed, name_of
from .ir import Graph
from .runtime import program_cache
from .runtime.program import aval
from .runtime import program_store
from .runtime.program_store import clear_programs
from .base.tree import flatten, unflatten

__all__ = [
    "Transformed",
    "cache_info",
    "clear_cache",
    "grad",
    "hessian",
    "jacobian",
    "jit",
    "make_ir",
    "make_kernels",
    "stop_gradient",
    "tap",
    "value_and_grad",
]


def _transform(kind: str):
    def make(
        fun=None,
        argnums=0,
        has_aux=False,
        static_argnums=(),
        backend=None,
        taps=False,
        holomorphic=False,
        *,
        argnum=None,
    ):
        argnums = _argnums(argnums, argnum, kind)
        options = (argnums, has_aux, static_argnums, backend, taps, holomorphic)
        if fun is None:  # used as @tg.grad(argnums=1)
            return lambda f: Transformed(f, kind, *options)
        return Transformed(fun, kind, *options)

    return make


def _argnums(argnums, argnum, name: str):
    """`argnum=` is HIPS autograd's spelling of `argnums=`: code written for autograd runs as it
    is. Both given with different values is a mistake, said as such."""
    if argnum is None:
        return argnums
    if argnums not in (0, argnum):
        raise TypeError(
            f"{name}() got argnums={argnums!r} and argnum={argnum!r}: pass one of them "
            "(argnum is autograd's spelling of argnums)"
        )
    return argnum


def grad(
    fun=None,
    argnums=0,
    has_aux=False,
    static_argnums=(),
    backend=None,
    taps=False,
    holomorphic=False,
    *,
    argnum=None,
):
    """The gradient of a scalar function with respect to argument(s) `argnums`.

    With `taps=True` it returns `(gradients, {name: cotangent})` for the values marked with
    `tg.tap` inside the function. The output must be real; of a complex argument `z = x + iy`
    the gradient is `df/dx - i df/dy` (docs/complex.md). `holomorphic=True`: `f` is a complex
    function of complex arguments, and the result is its complex derivative `f'(z)`.

    >>> import tracegrad as tg
    >>> float(tg.grad(lambda w, x: (w * x - 5.0) ** 2)(2.0, 3.0))
    6.0
    """
    options = (argnums, has_aux, static_argnums, backend, taps, holomorphic)
    return _transform("grad")(fun, *options, argnum=argnum)


def value_and_grad(
    fun=None,
    argnums=0,
    has_aux=False,
    static_argnums=(),
    backend=None,
    taps=False,
    holomorphic=False,
    *,
    argnum=None,
):
    """`(f(*args), grad(f)(*args))`, computed together in one program (`taps`, `holomorphic` as
    for grad).

    >>> import tracegrad as tg
    >>> value, g = tg.value_and_grad(lambda x: x ** 2 + 1.0)(3.0)
    >>> float(value), float(g)
    (10.0, 6.0)
    """
    options = (argnums, has_aux, static_argnums, backend, taps, holomorphic)
    return _transform("value_and_grad")(fun, *options, argnum=argnum)


def jacobian(
    fun=None,
    argnums=0,
    has_aux=False,
    static_argnums=(),
    backend=None,
    holomorphic=False,
    *,
    argnum=None,
):
    """d f / d x with shape `f(x).shape + x.shape`, all rows at once (one batched adjoint).
    Complex outputs need `holomorphic=True` (docs/complex.md).

    >>> import numpy as np, tracegrad as tg
    >>> tg.jacobian(lambda x: x ** 2)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    options = (argnums, has_aux, static_argnums, backend, False, holomorphic)
    return _transform("jacobian")(fun, *options, argnum=argnum)


def hessian(
    fun=None, argnums=0, static_argnums=(), backend=None, holomorphic=False, *, argnum=None
):
    """Second derivatives: `jacobian(grad(f))`, shape `x.shape + x.shape` (`holomorphic` as
    for grad: f'' of a complex function of complex arguments).

    >>> import numpy as np, tracegrad as tg
    >>> tg.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0]))
    array([[4., 2.],
           [2., 0.]])
    """
    argnums = _argnums(argnums, argnum, "hessian")
    if fun is None:
        return lambda f: hessian(f, argnums, static_argnums, backend, holomorphic)
    options = (argnums, False, static_argnums, backend, False, holomorphic)
    return Transformed(Transformed(fun, "grad", *options), "jacobian", *options)


def jit(fun=None, static_argnums=(), backend=None, guards=True):
    """Compile `fun` (forward only) and cache the program per argument signature.

    Python `if`, `while`, `int()` and indices on traced values are answered on the call that
    traces and kept as guards: a later call whose answers differ runs the program traced for
    them (docs/limitations.md). `guards=False` refuses them instead, as JAX does.

    >>> import numpy as np, tracegrad as tg
    >>> tg.jit(lambda x: 2.0 * x + 1.0)(np.arange(3.0))
    array([1., 3., 5.])
    """
    if fun is None:
        return lambda f: jit(f, static_argnums, backend, guards)
    transformed = Transformed(fun, "jit", (), False, static_argnums, backend)
    transformed.guards = bool(guards)
    return transformed


def stop_gradient(x):
    """The value of `x`, with zero derivative (PyTorch's `.detach()`).

    >>> import tracegrad as tg
    >>> float(tg.grad(lambda x: x * tg.stop_gradient(x))(3.0))  # d/dx (x * c) = c
    3.0
    """

    from .trace import Tracer, traced_call

    def stop(leaf):
        if isinstance(leaf, Tracer):
            return traced_call(lambda v: P.emit(P.stop_gradient_p, v), leaf)
        return leaf

    leaves, treedef = flatten(x)
    return unflatten(treedef, [stop(leaf) for leaf in leaves])


def tap(value, name: str, hook: Callable | None = None):
    """Mark an intermediate value inside a traced function; returns it unchanged.

    `tg.grad(f, taps=True)` then also returns d output / d value under `name`; `hook(name,
    cotangent)` is called after each gradient computation (hooks observe, they never change a
    gradient). The differentiation that owns a tap is the innermost one around the function that
    contains it; names must be unique within one traced function (in a loop, use f"h{i}").

    >>> import numpy as np, tracegrad as tg
    >>> def loss(w, x, b):
    ...     y = tg.tap(w * x + b, "y")
    ...     return (y - 5.0) ** 2
    >>> grads, taps = tg.grad(loss, taps=True)(2.0, 3.0, 1.0)
    >>> float(taps["y"])
    4.0
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"tap names must be non-empty strings, got {name!r}")
    if hook is not None and not callable(hook):
        raise TypeError(f"the hook of tap {name!r} must be callable, got {type(hook).__name__}")
    from .trace import Tracer, traced_call

    if not isinstance(value, Tracer):
        return value  # not traced: nothing to differentiate, nothing to observe
    if not P.is_float(value.dtype):
        raise TypeError(f"tap {name!r}: only float values have gradients, got dtype {value.dtype}")
    if any(n.prim is P.tap_p and n.params["name"] == name for n in value.builder.nodes):
        raise ValueError(
            f"tap name {name!r} is used twice in one traced function; names must be unique "
            "(a tap inside a loop needs a name per iteration, e.g. f'h{i}')"
        )
    return traced_call(lambda v: P.emit(P.tap_p, v, name=name, hook=hook), value)


def make_ir(fun: Callable, static_argnums=(), optimize: bool = True):
    """A function returning the IR graph `fun` traces to (after any transforms), printable.

    >>> import numpy as np, tracegrad as tg
    >>> print(tg.make_ir(lambda x: np.sin(x) * 2.0)(np.ones(3)))  # doctest: +ELLIPSIS
    graph(%0:f64[3]) {
      %1:f64[3] = sin %0 ...
      %2:f64[3] = const[shape=(3,), value=2.] ...
      %3:f64[3] = mul %1 %2 ...
      return %3
    }
    """
    transformed = (
        fun if isinstance(fun, Transformed) else Transformed(fun, "jit", (), False, static_argnums)
    )

    def make(*args, **kwargs) -> Graph:
        transformed._check_call(args)
        static, positions, leaves, treedef = transformed.split_arguments(args, kwargs)
        names = leaf_names(treedef, positions, transformed.self_shift)
        arrays = [
            as_array(leaf, n, name_of(transformed)) for leaf, n in zip(leaves, names, strict=True)
        ]
        from . import passes
        from .tracing import branches, indexed_arrays
        from .tracing.scope import Scope

        avals = [aval(a) for a in arrays]

        def build(scope):
            with branches.given_inputs(arrays if transformed.guards else None) as guards:
                graph, _, _ = transformed.build(avals, treedef, static, positions, scope)
            return graph, guards

        def walk():  # for the arrays it indexes with traced values; captured arrays stay constants
            scope = Scope.of(transformed, static)
            scope.constants = True
            return scope

        _, (graph, guards) = indexed_arrays.build_with_stand_ins(walk, build)
        graph = passes.optimize(graph, lower=False) if optimize else graph
        graph.guards = tuple(guards)
        return graph

    return make


def make_kernels(
    fun: Callable,
    static_argnums=(),
    backend: str | None = None,
    loop_ir: bool = False,
    llvm_ir: bool = False,
):
    """A function returning the source of the fused kernels `fun` compiles to, readable.

    Works for any transform, like `make_ir`: `tg.make_kernels(tg.grad(f))(x)`. The text shows
    the fusion plan, each kernel with a comment per IR node (its values and the user's line),
    and the driver that runs them. `backend` is "cpu" or "cuda" (default: the default backend,
    or "cpu" when that is the interpreter). With `loop_ir=True` the text is the fused loops as
    the backend lowers them into the loop IR, before its printer writes them as source; with
    `llvm_ir=True` (cpu) it is the LLVM IR the cpu backend's llvmlite compiler is given.
    """
    import importlib

    make_graph = make_ir(fun, static_argnums, optimize=False)
    name = backend or backends.default_backend_name()
    module = importlib.import_module(
        "tracegrad.codegen_cuda" if name == "cuda" else "tracegrad.codegen_cpu"
    )

    def make(*args, **kwargs) -> str:
        from . import passes

        graph, _ = passes.extract_hooks(passes.optimize(make_graph(*args, **kwargs)))
        if llvm_ir:
            if name == "cuda":
                raise ValueError("llvm_ir=True shows the cpu backend's kernels; use backend='cpu'")
            return module.program_llvm_ir(graph)
        return module.program_loop_ir(graph) if loop_ir else module.program_source(graph)

    return make


def cache_info():
    """What the compiled-kernel disk cache holds: its directory, entries and bytes on disk, the
    kernels loaded in this process and the programs held in memory."""
    from .base import cache

    return cache.info(programs=program_store.held())


def clear_cache() -> None:
    """Empty the compiled-kernel cache, on disk and in memory (programs are compiled again)."""
    from .base import cache

    clear_programs()
    cache.clear()
    program_cache.clear()
