"""The traced NumPy namespace's handlers, by theme (stage: tracing, the first stage of the pipeline:
each handler lowers a NumPy function on traced values to primitives). The entry points are
tracegrad/numpy_api.py (`UFUNCS`, `FUNCTIONS`, `SUPPORTED`) and tracegrad/numpy_arrays.py.
"""
