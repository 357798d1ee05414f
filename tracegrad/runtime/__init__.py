"""The runtime: what runs compiled programs, and the stores that keep them between calls.

The last stage of the pipeline (trace -> IR -> adjoint -> passes -> fusion -> code generation ->
runtime), below only the public API (api.py) and the command line.

- program_store.py: the in-memory program store, keyed by (transform, backend, argument
  signature): the one home of the store and its key, where a call finds its program or keeps a
  new one, and the count of traces;
- program.py: `CompiledCall`, a compiled program ready to call, and the cached-call fast path.
- program_cache.py: persisted programs, the optimised graph of a call kept on disk, named by
  digests.py: digests of code, classes and values that mean the same in every process, and
  program_data.py: graphs (with their loop and branch bodies) and output trees as plain data.
- tiered.py: a new program answers on the NumPy interpreter while it compiles in the background.

Beside them, the services the code generators and backends call while they build and run
kernels. They import nothing later than the IR, so an earlier stage may use them:

- cache.py: the disk cache of compiled kernel modules; cache_files.py: where the disk caches
  live, which of their folders and files may be trusted, and hashes of source files;
- progress.py: the progress line and size guard of a long compilation;
- blas_threads.py: small matrix products on one BLAS thread;
- host_kernels.py: compiled host loops for steps that have no fused kernel.
"""
