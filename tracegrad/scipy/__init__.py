"""SciPy's functions on traced values (stage: tracing), as `jax.scipy` is JAX's: import
`tracegrad.scipy.stats` (distributions written in NumPy calls, which trace) and
`tracegrad.scipy.special` (scipy.special's functions, with the Python functions SciPy does not
dispatch, such as polygamma, traced too). Each submodule is imported on request; on traced values
neither needs SciPy, on plain arrays `special` calls SciPy's own functions.
"""
