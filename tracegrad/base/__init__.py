"""The ground floor, under every stage of the pipeline: what all of them use and that imports
nothing else of tracegrad. The TRACEGRAD_* variables (config), the errors users see, stable
hashes, pytrees, the kernel disk cache, progress lines, BLAS threads and host kernels."""

# The disk caches put the version into the salt of their entries; the package re-exports it.
__version__ = "0.1.0"
