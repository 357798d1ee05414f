"""The CPU code generator's parts: the code generation stage of the pipeline, beside its entry
point `tracegrad/codegen_cpu.py`.

- `kernels.py`: a fused loop's kernel module, printed from the loop IR (`CpuPrinter`);
- `program.py`: the program that runs a plan's steps (the generated driver, threads for large
  loops, BLAS for matrix products, evaluation steps);
- `scan_loop.py`: a scan whose body is only fused kernels, as one compiled loop.
"""
