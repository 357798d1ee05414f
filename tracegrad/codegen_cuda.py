"""Fused CUDA kernels: the cuda backend. The same fusion plan as the CPU backend, another generator.

A compiled program is one kernel module (written into the kernel cache directory, see
`tracegrad.base.cache`, so Numba can keep the compiled kernels on disk) holding the program's kernels
(`tracegrad.cuda.kernels`) and `run`, a generated driver that launches them in order. Data stays
on the device for the whole call:

- NumPy inputs are copied in once, and the results out once (NumPy results for NumPy inputs);
- device inputs (numba device arrays, or any object with `__cuda_array_interface__`: CuPy arrays,
  PyTorch CUDA tensors) are used in place, and the results are new device arrays;
- constants are copied in when the program is built; scratch buffers (intermediate values,
  partial results of reductions) are allocated on the first call and reused by every call;
- a result handed to the user is never written again: with device inputs each call allocates its
  results, and a result that would alias an input, a constant or a scratch buffer is copied.

Steps the kernels cannot do (the plan's `EvalStep`s: bool matrix products, unusual dtypes) run on
the host through the primitive's NumPy implementation, a copy each way (`TRACEGRAD_LOG=cuda`
says when). Without a GPU, the backend works on Numba's CUDA simulator (`NUMBA_ENABLE_CUDASIM=1`)
at small sizes; otherwise `backend="cuda"` raises `tracegrad.BackendError`.
"""

from __future__ import annotations

from . import ir
from .cuda import device as dev
from .cuda import lowering as lower_gpu
from .cuda.program import (  # noqa: F401 (the entry point's names)
    SUPPORTED_DTYPES,
    CudaProgram,
    build,
    plan_graph,
    supports,
)
from .fusion import loop_ir, render
from .ir import Graph

# A device of the kind the benchmarks target, for showing kernels on a machine without a GPU.
REFERENCE_CONFIG = dev.config_from_properties(
    sms=132,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    warp=32,
    shared_bytes=48 * 1024,
    name="reference device (no GPU here): 132 SMs",
)


def program_source(graph: Graph) -> str:
    """The readable source the cuda backend makes of an optimised graph (for this machine's GPU,
    the simulator, or a reference device where there is neither)."""
    ok, _ = dev.availability()
    return build(graph, dev.launch_config() if ok else REFERENCE_CONFIG, load=False).source()


def program_loop_ir(graph: Graph) -> str:
    """The fused loops of the program the cuda backend makes of an optimised graph, as kernels
    of the loop IR (lowered for the GPU, before printing)."""
    ok, _ = dev.availability()
    cfg = dev.launch_config() if ok else REFERENCE_CONFIG
    plan, names, scratch = plan_graph(graph), ir.value_names(graph), []
    notes = render.Notes(names, "partial results")
    kernels = [k for loop in plan.loops for k in lower_gpu.lower(loop, cfg, notes, scratch)]
    return "\n\n".join(loop_ir.text(k) for k in kernels) + "\n"


class CudaBackend:
    name = "cuda"

    def available(self) -> tuple[bool, str]:
        return dev.availability()

    def compile(self, graph: Graph) -> CudaProgram:
        return render.dumped(build(graph), "cuda_program")


BACKEND = CudaBackend()
