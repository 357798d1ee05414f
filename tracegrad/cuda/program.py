"""The CUDA program: its module of kernels and driver, the device runtime that runs the launches,
the recycler of device buffers, and building one from a graph (`build`). The entry point
`tracegrad/codegen_cuda.py` shows programs and registers the backend."""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable, Sequence

import numpy as np

from ..base import config
from .. import fusion, ir, passes
from ..fusion import limits, render
from ..base import cache
from . import device as dev
from . import device_loops
from .. import primitives as P
from .kernels import DEVICE_FUNCTIONS, Kernels, library_source, loop_kernels, matmul_kernel
from ..fusion import EvalStep, FusedLoop, MatmulStep, Plan, ViewStep
from ..ir import Graph, Node


log = logging.getLogger("tracegrad")

SUPPORTED_DTYPES = render.SUPPORTED_DTYPES


def supports(node: Node) -> bool:
    """Whether a kernel (or a matmul kernel) computes this node; the rest run on the host
    (products and reductions of bools too)."""
    return render.supports(node, bool_products=False)


def render_scalar(node: Node, args: Sequence[str]) -> str:
    """A node's scalar expression, with the math library (libm names, which numba.cuda maps to
    CUDA's libdevice)."""
    return render.render_node(node, args, "libm")


def _log(message: str, *args) -> None:
    if config.log_enabled("cuda"):
        log.info(message, *args)


# ----------------------------------------------------------------------------------------------
# The program module


@functools.lru_cache(maxsize=8)
def _salt(cfg: dev.LaunchConfig) -> str:
    """What compiled kernels depend on besides their source: numba-cuda and the device."""
    try:
        from importlib.metadata import version

        numba_cuda = version("numba-cuda")
    except Exception:
        numba_cuda = "unknown"
    return cache.salt(("cuda", f"numba-cuda={numba_cuda}", repr(cfg)))


def _module_text(plan: Plan, graph: Graph, cfg: dev.LaunchConfig, salt: str):
    """(module source, per-step launches, scratch buffers)."""
    names = ir.value_names(graph)
    steps: list[tuple[object, Kernels]] = []
    scratch, helpers, sources = [], set(), []
    for j, step in enumerate(plan.steps):
        kernels = Kernels()
        kernels.scratch = scratch  # partial-result buffers are numbered across the program
        if isinstance(step, FusedLoop):
            renamed = FusedLoop(
                f"kernel_{step.name}",
                step.shape,
                step.ops,
                step.stores,
                step.reductions,
                step.roots,
                step.scans,
            )
            helpers |= loop_kernels(renamed, cfg, names, render_scalar, kernels)
        elif isinstance(step, MatmulStep):
            matmul_kernel(
                step,
                f"matmul_{j}",
                cfg,
                names,
                kernels,
                render_scalar,
                (_is_transposed(plan, step.a), _is_transposed(plan, step.b)),
            )
        sources += kernels.sources
        steps.append((step, kernels))
    driver = _driver(plan, steps, scratch, names)
    header = [
        f"# tracegrad program for the cuda backend: a graph of {len(graph.nodes)} nodes, "
        f"{sum(len(k.launches) for _, k in steps)} kernel launches",
        f"# launch configuration: {cfg.describe()}",
        f"# salt {salt}",
        "#",
        "# the fusion plan:",
        *("#   " + line for line in plan.describe().splitlines()),
        "",
        "import math",
        "",
        "import numpy as np",
        "from numba import cuda",
        "",
        '_CACHE = globals().get("_TG_CACHE", False)',
        "",
    ]
    body = [
        h for h in (helper for _, (_, helper) in sorted(DEVICE_FUNCTIONS.items())) if h in helpers
    ]
    if any("cmath." in source for source in sources):
        header.insert(header.index("import math"), "import cmath")
    text = "\n".join(header) + "\n\n" + "\n\n\n".join(body + sources + [driver]) + "\n"
    return text, steps, scratch


def _inverse_view(node: Node) -> P.Primitive | None:
    """The view primitive whose view of the node's result is its input (unslice: slice), if the
    node is one that zeros and a strided copy make."""
    m = node.prim.index_map
    return P.PRIMITIVES[m.inverse] if m is not None and m.inverse is not None else None


def _is_transposed(plan: Plan, buffer) -> bool:
    """Whether `buffer` is a view that reads its source's last two axes swapped."""
    for step in plan.steps:
        if isinstance(step, ViewStep) and step.out is buffer:
            m, n = step.node.prim.index_map, len(step.out.shape)
            if m.through is None or not m.inline(step.node) or n < 2:
                return False
            out = fusion.identity_index(n)
            read = m.through(step.node, out, lambda offset: fusion.Index(None, 0, offset))
            return len(read) >= 2 and tuple(read[-2:]) == (out[-1], out[-2])
    return False


def _arguments(plan: Plan, scratch) -> list:
    """The driver's parameters: inputs, constants, scratch buffers, results (views are made)."""
    order = {"input": 0, "const": 1, "temp": 2, "output": 3}
    bufs = [b for b in plan.buffers if b.role in order]
    bufs.sort(key=lambda b: order[b.role])
    temps_end = next((i for i, b in enumerate(bufs) if b.role == "output"), len(bufs))
    return bufs[:temps_end] + list(scratch) + bufs[temps_end:]


def _driver(plan: Plan, steps, scratch, names: dict) -> str:
    params = ", ".join(["_rt"] + [b.name for b in _arguments(plan, scratch)])
    lines = [
        f"def run({params}):",
        '    """Launch the kernels in order; returns the results (device arrays)."""',
    ]
    for j, (step, kernels) in enumerate(steps):
        if isinstance(step, (FusedLoop, MatmulStep)):
            if not kernels.launches:
                lines.append(f"    # {type(step).__name__} {j}: nothing to compute (empty)")
            for launch in kernels.launches:
                lines.append(f"    # {launch.comment}")
                grid = launch.grid if len(launch.grid) > 1 else launch.grid[0]
                block = launch.block if len(launch.block) > 1 else launch.block[0]
                lines.append(f"    {launch.kernel}[{grid}, {block}]({', '.join(launch.args)})")
        elif isinstance(step, ViewStep):
            node = step.node
            lines.append(
                f"    # {names.get(step.out.var, '?')} = {node.prim.name} of "
                f"{names.get(node.inputs[0], '?')}: a view, nothing is copied"
            )
            lines.append(f"    {step.out.name} = _rt.view({step.src.name}, {j})")
        elif isinstance(step, EvalStep):
            args = ", ".join(b.name for b in step.args)
            if _inverse_view(step.node) is not None:
                how = "zeros, then a strided copy"
            elif device_loops.runs_on_device(step.node):
                how = "on the device, its graphs' kernels launched step after step"
            else:
                how = "on the host (no kernel for it)"
            lines.append(f"    # {names.get(step.out.var, '?')} = {step.node.prim.name}: {how}")
            lines.append(f"    _rt.evaluate({j}, {step.out.name}, [{args}])")
    lines.append(f"    return [{', '.join(b.name for b in plan.outputs)}]")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Running


@functools.lru_cache(maxsize=4)
def _library(salt: str):
    module = cache.load_module(library_source(salt))
    dev.prepare_kernels(module)
    return module


class _Runtime:
    """What the generated driver calls besides kernels: views, copies, host evaluation."""

    def __init__(self, plan: Plan, cfg: dev.LaunchConfig, salt: str, in_loop: bool = False):
        self.plan, self.cfg, self.salt = plan, cfg, salt
        self.in_loop = in_loop  # the program is a loop's body (or a graph inside one)
        self.steps = plan.steps
        self._impls: dict[int, Callable] = {}
        self._device_runners: dict[int, device_loops.Runner | None] = {}

    @property
    def lib(self):
        return _library(self.salt)

    def _grid(self, size: int) -> int:
        return max(1, min(-(-size // self.cfg.threads), self.cfg.blocks))

    def copy_into(self, src, dst) -> None:
        shape, _, _ = dev.layout(dst)
        size = int(np.prod(shape, dtype=np.int64))
        if size == 0:
            return
        rank = max(1, len(shape))
        if not shape:
            src, dst = dev.view(src, (1,), (0,)), dev.view(dst, (1,), (0,))
        getattr(self.lib, f"copy{rank}")[self._grid(size), self.cfg.threads](src, dst)

    def copy(self, arr):
        """A fresh C-contiguous copy of a device array."""
        shape, _, _ = dev.layout(arr)
        out = dev.cuda().device_array(shape, dtype=arr.dtype)
        self.copy_into(arr, out)
        return out

    def fill(self, arr, value) -> None:
        shape, _, _ = dev.layout(arr)
        size = int(np.prod(shape, dtype=np.int64))
        if size:
            flat = dev.view(arr, (size,), (arr.dtype.itemsize,))
            self.lib.fill1[self._grid(size), self.cfg.threads](flat, arr.dtype.type(value))

    def view(self, src, j: int):
        step = self.steps[j]
        return self.strided(src, step.node.prim, step.node.params, step.src.shape, step.out.shape)

    def strided(self, src, prim, params: dict, src_shape, out_shape):
        """The view a shape primitive makes of `src`: new strides, same memory."""
        shape, strides = dev.ir_layout(src, src_shape)
        itemsize = src.dtype.itemsize
        m = prim.index_map
        if m is None or not m.view:  # pragma: no cover
            raise AssertionError(f"{prim.name} is not a view")
        if m.strides is not None:
            strides, offset = m.strides(params, shape, strides, tuple(out_shape))
        else:  # a view of contiguous memory only (reshape)
            if not _contiguous(shape, strides, itemsize):
                src = self.copy(src)
            strides, offset = dev.c_strides(tuple(out_shape), itemsize), 0
        if not out_shape:
            return dev.view(src, (1,), (itemsize,), offset)
        return dev.view(src, tuple(out_shape), strides, offset)

    def evaluate(self, j: int, out, args) -> None:
        step = self.steps[j]
        node = step.node
        inverse = _inverse_view(node)
        if inverse is not None:  # zeros, and the input copied through the inverse view
            self.fill(out, 0)
            params = {k: v for k, v in node.params.items() if k != "shape"}
            target = self.strided(out, inverse, params, node.out.shape, node.inputs[0].shape)
            self.copy_into(args[0], target)
            return
        device_runner = self._device_runner(j, node)
        if device_runner is not None:  # a loop or conditional: its carries stay on the device
            device_runner(out, args)
            return
        _log("tracegrad: cuda: %s runs on the host (a copy each way)", node.prim.name)
        host = [self.to_host(a, b.shape) for a, b in zip(args, step.args, strict=True)]
        with np.errstate(all="ignore"):
            value = np.asarray(self._impl(j, node)(*host), dtype=step.out.dtype)
        out.copy_to_device(np.ascontiguousarray(value).reshape(dev.internal_shape(value.shape)))

    def _device_runner(self, j: int, node) -> device_loops.Runner | None:
        """How step j runs on the device when it is a loop or conditional (its graphs compiled
        when the step first runs), else None."""
        if j not in self._device_runners:
            self._device_runners[j] = device_loops.runner(node, compile_subgraph, self)
        return self._device_runners[j]

    def _impl(self, j: int, node) -> Callable:
        """The host function for step j: the primitive's reference implementation, or what its
        `run_compiled` facet makes (a scatter-add's compiled host loop)."""
        if j not in self._impls:
            if node.prim.run_compiled is not None:
                self._impls[j] = node.prim.run_compiled(node, compile_subgraph)
            else:
                self._impls[j] = functools.partial(node.prim.impl, **node.params)
        return self._impls[j]

    def to_host(self, arr, ir_shape) -> np.ndarray:
        if not dev.is_c_contiguous(arr):
            arr = self.copy(arr)
        return dev.to_host(arr, tuple(ir_shape))


class _Recycler:
    """Result arrays for calls with device inputs: fresh, or one the user has let go of.

    A result handed to the user must never be written again while anything can still see it. An
    array we allocated is taken back only when nothing but this recycler refers to it or to its
    memory (no variable, container, view, slice or other library's array built on it): its
    reference counts are then what they were right after allocation, measured the same way.
    It keeps at most `KEEP` arrays per result (so a loop `g = f(x)` reuses the one from two calls
    ago); allocating device memory of that size every call costs more than the kernels may."""

    KEEP = 2

    def __init__(self, buffer):
        self.buffer = buffer
        self.arrays: list = []
        self.baselines: list = []

    def _counts(self, k: int) -> tuple[int, int]:
        return sys.getrefcount(self.arrays[k]), dev.memory_users(self.arrays[k])

    def take(self):
        for k in range(len(self.arrays)):
            if self._counts(k) == self.baselines[k]:
                return self.arrays[k]
        if len(self.arrays) == self.KEEP:  # all in use: the oldest is forgotten, not reused
            del self.arrays[0], self.baselines[0]
        self.arrays.append(dev.empty(self.buffer.shape, self.buffer.dtype))
        self.baselines.append(self._counts(len(self.arrays) - 1))
        return self.arrays[-1]


def _contiguous(shape, strides, itemsize) -> bool:
    expect = dev.c_strides(tuple(shape), itemsize)
    return all(d <= 1 or s == e for d, s, e in zip(shape, strides, expect, strict=True))


class CudaProgram:
    """A compiled graph: call it with the input arrays (host or device), get the outputs."""

    def __init__(
        self,
        graph: Graph,
        plan: Plan,
        cfg: dev.LaunchConfig,
        load: bool = True,
        in_loop: bool = False,
    ):
        self.graph, self.plan, self.cfg = graph, plan, cfg
        self.salt = _salt(cfg)
        self.text, self.steps, self.scratch = _module_text(plan, graph, cfg, self.salt)
        self.arguments = _arguments(plan, self.scratch)
        self._lock = threading.Lock()
        self._temps: list | None = None
        self._host_outputs: list | None = None
        self._recyclers = [_Recycler(b) for b in self.arguments if b.role == "output"]
        self._simulated = dev.simulated()
        if load:
            self.module = cache.load_module(self.text)
            dev.prepare_kernels(self.module)
            self._rt = _Runtime(plan, cfg, self.salt, in_loop)
            self._consts = [dev.to_device(b.value) for b in self.arguments if b.role == "const"]

    def source(self) -> str:
        """The readable program: the plan, every kernel (a comment per node) and the driver."""
        return self.text

    def host_steps(self) -> list[str]:
        """The primitives of the steps that run on the host (a copy each way)."""
        return host_steps(self.plan)

    def hazards(self) -> list[str]:
        """What makes it unsafe to run the program on values it was not meant for (see
        `hazards`); empty when it is safe."""
        return hazards(self.plan)

    def _allocate(self, role: str) -> list:
        return [dev.empty(b.shape, b.dtype) for b in self.arguments if b.role == role]

    def __call__(self, args: Sequence) -> list:
        plan = self.plan
        on_device = any(dev.is_device_array(a) for a in args)
        inputs = []
        for b, a in zip(plan.inputs, args, strict=True):
            if dev.is_device_array(a):
                inputs.append(dev.as_shape(dev.adopt(a), b.shape))
            else:
                inputs.append(dev.to_device(np.asarray(a, dtype=b.dtype)))
        return self._launch(inputs, on_device, internal=False)

    def run_on_device(self, inputs: Sequence, into: dict[int, object] | None = None) -> list:
        """Run on device arrays in their internal shapes (a 0-d value as a 1-element array), as a
        loop's body does step after step; nothing crosses to the host.

        The results are device arrays in internal shapes too, never an input, a constant or a
        scratch buffer, so the next step may read them while it writes its own. `into` maps
        result numbers to device arrays to write them into (a row of a loop's stacked result,
        the carry buffer the next step reads): a result of that array's dtype and shape is
        that array (its kernels write there, or it is copied there); others come back fresh."""
        inputs = [dev.as_shape(a, b.shape) for b, a in zip(self.plan.inputs, inputs, strict=True)]
        return self._launch(inputs, True, internal=True, into=self._fitting(into or {}))

    def _fitting(self, into: dict[int, object]) -> dict[int, object]:
        """The entries of `into` whose array has its result's dtype and internal shape."""
        outputs = self.plan.outputs
        return {
            k: a
            for k, a in into.items()
            if a is not None
            and a.dtype == outputs[k].dtype
            and dev.layout(a)[0] == dev.internal_shape(outputs[k].shape)
        }

    def _launch(self, inputs: list, on_device: bool, internal: bool, into=None) -> list:
        with self._lock:
            if self._temps is None:
                self._temps = self._allocate("temp")
            if on_device:
                outputs = self._device_outputs(into or {})
            else:
                if self._host_outputs is None:
                    self._host_outputs = self._allocate("output")
                outputs = self._host_outputs
            if self._simulated:
                with dev.simulator_threads():
                    results = self.module.run(
                        self._rt, *inputs, *self._consts, *self._temps, *outputs
                    )
                    return self._deliver(results, outputs, on_device, internal, into)
            results = self.module.run(self._rt, *inputs, *self._consts, *self._temps, *outputs)
            return self._deliver(results, outputs, on_device, internal, into)

    def _device_outputs(self, into: dict[int, object]) -> list:
        """The arrays the kernels write the results into: the caller's where `into` names one
        for a result that is an output buffer of its own, else one from its recycler."""
        outputs = self.plan.outputs
        given = {
            id(outputs[k]): a
            for k, a in into.items()
            if outputs[k].role == "output" and outputs.count(outputs[k]) == 1
        }
        return [
            r.take() if given.get(id(r.buffer)) is None else given[id(r.buffer)]
            for r in self._recyclers
        ]

    def _deliver(
        self, results: list, outputs: list, on_device: bool, internal: bool, into=None
    ) -> list:
        owned = {id(a) for a in outputs} if on_device else set()
        given: set[int] = set()
        final = []
        for k, (b, arr) in enumerate(zip(self.plan.outputs, results, strict=True)):
            if on_device:
                target = into.get(k) if into else None
                if target is not None and arr is not target:
                    self._rt.copy_into(arr, target)  # where the caller wants it
                    arr = target
                elif id(arr) not in owned or id(arr) in given:
                    arr = self._rt.copy(arr)  # an input, a constant, a view, scratch or a repeat
                given.add(id(arr))
                final.append(arr if internal else dev.user_array(arr, b.shape))
            else:
                final.append(self._rt.to_host(arr, b.shape))
        return final


def host_steps(plan: Plan) -> list[str]:
    """The primitives of the plan's steps that run on the host (their operands are copied there
    and their result back)."""
    return [
        step.node.prim.name
        for step in plan.steps
        if isinstance(step, EvalStep)
        and _inverse_view(step.node) is None
        and not device_loops.runs_on_device(step.node)
    ]


def hazards(plan: Plan) -> list[str]:
    """What makes it unsafe to run a plan on values it was not meant for (the branch of a cond
    that is not taken, a while loop's step past its last), by primitive: a step on the host
    (it may raise: an index out of range), a loop whose trip count is a run-time value (it may
    not end); in the plan or in the graphs its scans and conds hold. Kernels raise nothing:
    they give nan and inf, and their reads are in range whatever the values."""
    found = host_steps(plan)
    for step in plan.steps:
        if isinstance(step, EvalStep) and device_loops.runs_on_device(step.node):
            if not device_loops.ends(step.node):
                found.append(step.node.prim.name)
                continue
            for graph in device_loops.held_graphs(step.node):
                found += hazards(plan_graph(passes.optimize(graph)))
    return found


def compile_subgraph(graph: Graph, in_loop: bool = False) -> Callable:
    """A graph a node holds (a loop body: `in_loop`), optimised and compiled for the device."""
    return build(passes.optimize(graph), in_loop=in_loop)


def plan_graph(graph: Graph) -> Plan:
    limits.check_graph(graph, "cuda")
    return fusion.plan(graph, supports)


def build(
    graph: Graph, cfg: dev.LaunchConfig | None = None, load: bool = True, in_loop: bool = False
) -> CudaProgram:
    cfg = dev.launch_config() if cfg is None else cfg
    return CudaProgram(graph, plan_graph(graph), cfg, load=load, in_loop=in_loop)
