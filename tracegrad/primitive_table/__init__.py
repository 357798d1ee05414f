"""The primitive table's entries and facets (stage: primitives, the second stage of the pipeline,
after the IR). `tracegrad/primitives.py` is the stage's entry point: it imports these modules in
the table's order and re-exports what the other stages use.

- `facets.py`: `Primitive`, its facets (`Monoid`, `IndexMap`, `Algebra`, `Pairing`) and `PRIMITIVES`;
- `ops.py`: the op constructors (NumPy semantics on IR values) and the helpers rules share;
- `batching.py`: batching rules' plumbing;
- the entries: `elementwise.py`, `special.py`, `piecewise.py`, `identities.py`, `reductions.py`,
  `matmul.py`, `shape.py`, `indexing.py`, `random.py` (draws from a NumPy generator),
  `bessel.py`, `fft.py`, `odeint.py` (scipy.integrate.odeint and its adjoint, host steps).
"""
