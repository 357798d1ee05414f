"""Tracing support (beside trace.py, the entry point of the tracing stage): the dispatch registry,
what a traced function reads from outside its arguments, and how a program stays current.

The dispatch registry (dispatch.py) is the one set of tables NumPy's calls on tracers are looked
up in: `UFUNCS` and `FUNCTIONS` by NumPy's name, and the named `HOOKS` a tracer calls for
indexing, writes and the traced constructors. trace.py imports the registry and none of the
handlers; each handler registers itself where it is defined (tracegrad/numpy_namespace/,
linalg/functions.py, constructors.py here), and importing tracegrad.numpy_namespace completes
the tables, as every module that traces does.

A user's function reads globals, closure variables, default arguments and attributes of static
arguments. A compiled program must never return a stale result when one of them changes, so
before a top-level trace tracegrad walks everything the function can reach *by name* (the names
in its code, recursively through the user functions, objects and containers it reaches) and
records a `Scope`. After the trace, the scope becomes a `Captured` object that the program
checks on every call:

- an array used directly in the traced computation is a *hidden input* of the program: it is read
  through its path (say, `loss.__globals__['X']`) on every call and passed to the compiled code,
  so in-place changes (`X[:] = ...`) and rebinding (`X = new_array`, same shape and dtype) are
  seen without tracing again;
- a view of such an array (`X[:, 0]`, `X.T`) is a hidden input held by reference (so in-place
  changes are seen); its array must stay the same object, else the function is traced again;
- an array the trace can have read with plain NumPy (`X.mean(0)` is computed while tracing and
  baked into the program) is compared with a snapshot on every call;
- Python numbers, strings, tuples, dtypes, modules, functions' code and other objects are guarded
  by value or identity: a change traces again, and `TRACEGRAD_LOG=retrace` names what changed.

The guard of a program is generated as one small Python function, so a call pays a few dictionary
and attribute reads for it.

- scope.py: the walk and the `Scope` it records; reads.py: library modules, random generators
  and array subclasses; guards.py: paths, guards and a program's `Captured` check;
- source.py: the user's line (the IR's source comments, errors); messages.py: what tracing says
  when a traced value is asked for something a trace cannot give (`Unknowable`, a base of
  `Tracer`), or a function has no traced version;
- ndarray.py: ndarray's operators and methods on a tracer (`NdarrayInterface`, a base of
  `Tracer`);
- dispatch.py: the registry; fillable.py: arrays NumPy's constructors make while tracing, which a
  traced value may be written into; constructors.py: np.array, np.asarray, np.full and SciPy's
  softmax family on traced values (above trace.py, as the handlers are); debugging.py:
  `tg.debug_print`.
"""
