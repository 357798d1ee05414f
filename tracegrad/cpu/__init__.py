"""The CPU code generator's parts: the code generation stage of the pipeline, beside its entry
point `tracegrad/codegen_cpu.py`.

- `kernels.py`: a fused loop's kernel module, printed from the loop IR (`CpuPrinter`);
- `program.py`: the program that runs a plan's steps (the generated driver, threads for large
  loops, BLAS for matrix products, evaluation steps);
- `scan_loop.py`: a scan whose body is only fused kernels, as one compiled loop.

What the backend store asks of the target before anything of it is imported (this package's
functions: finding Numba without importing it, the key of the math mode) lives here.
"""

import importlib.util
import sys

from ..base import config


def cpu_variant() -> tuple:
    """What the cpu backend's compiled code depends on besides the graph: the math mode, as
    decided from `tracegrad.vmath.set_math_mode` (when vmath is imported) and TRACEGRAD_MATH,
    and the kernel compiler (TRACEGRAD_CPU_COMPILER).
    Read on every cached call: cheap, and without importing vmath (nor Numba with it)."""
    vm = sys.modules.get("tracegrad.vmath")
    return (getattr(vm, "_override", None), config.math(), config.cpu_compiler())


def cpu_available() -> tuple[bool, str]:
    """Numba found, not imported: importing it costs half a second, paid only when a kernel is
    compiled or loaded (on a background thread, with tiered execution)."""
    if "numba" in sys.modules or importlib.util.find_spec("numba") is not None:
        return True, ""
    return False, "numba is not installed"
