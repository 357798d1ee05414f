"""The CUDA code generator's parts: the code generation stage of the pipeline, beside its entry
point `tracegrad/codegen_cuda.py` (mirroring `cpu/`).

- `lowering.py`: a fused loop or a matrix product lowered to the loop IR for the GPU (grid-stride
  loops, blocks of threads, trees in shared memory, tiled products);
- `kernels.py`: the loop IR printed as `numba.cuda.jit` kernels (`CudaPrinter`);
- `program.py`: the program that runs a plan's launches (its driver, device runtime, recycler);
- `device.py`: finding a GPU (or Numba's simulator), launch sizes, device arrays.
"""
