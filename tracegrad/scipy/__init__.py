"""SciPy's functions on traced values (stage: tracing), as `jax.scipy` is JAX's: import
`tracegrad.scipy.stats` (distributions written in NumPy calls, which trace),
`tracegrad.scipy.special` (scipy.special's functions, with the Python functions SciPy does not
dispatch, such as polygamma, traced too) and `tracegrad.scipy.linalg` (solve_banded,
solve_sylvester). Each submodule is imported on request; on traced values none needs SciPy, on
plain arrays `special` and `linalg` call SciPy's own functions.
"""
