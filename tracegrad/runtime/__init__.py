"""The runtime: the top floor of the pipeline (trace -> IR -> adjoint -> passes -> fusion -> code
generation -> runtime), below only the public API (api.py, calls/) and the command line.

- backends.py: the backend interface, the NumPy backend (the interpreter), finding the compiled
  ones (without importing their code generators until they compile);
- program_store.py: the in-memory program store, keyed by (transform, backend, argument
  signature): `find` and `keep` (it compiles nothing: the call's path does, calls/), and the
  count of traces;
- program.py: `CompiledCall`, a compiled program ready to call, and the cached-call fast path;
- program_cache.py: persisted programs, the optimised graph of a call kept on disk, named by
  digests.py: digests of code, classes and values that mean the same in every process, and
  program_data.py: graphs (with their loop and branch bodies) and output trees as plain data;
- tiered.py: a new program answers on the NumPy interpreter while it compiles in the background.

The services the code generators call while they build and run kernels (the disk cache of
kernel modules, progress lines, BLAS threads, host kernels) are on the ground floor, base/.
"""
