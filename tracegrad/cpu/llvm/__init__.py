"""The CPU backend's second compiler: loop IR printed as LLVM IR and compiled with llvmlite.

Numba spends seconds per kernel, most of it in its Python front end; the same kernels written
as LLVM IR and given to llvmlite directly compile in a tenth of a second and run as fast.

- `engine`: LLVM IR text -> optimised object code for this CPU -> callable addresses, with the
  object code cached in memory and on disk (`<cache root>/native/`);
- `vmath_ir`: the functions of `tracegrad.vmath` as LLVM IR definitions with plain C signatures,
  taken once from Numba and cached as text, so that a kernel that declares them gets them
  inlined and vectorised;
- `native_cache`: the files of the `native/` folder (checksums, atomic writes, trimming).

Importing this package imports nothing heavy; llvmlite loads on the first compilation.
"""
