"""The traced NumPy namespace (stage: tracing): every handler, by theme, each lowering a NumPy
function on traced values to primitives and registering itself where it is defined in the dispatch
registry (tracing/dispatch.py: `UFUNCS`, `FUNCTIONS`, and the `HOOKS` that trace.py's `Tracer`
calls for indexing and writes).

Importing this package completes the registry: it imports every handler module, np.linalg's
(tracegrad/linalg/functions.py) and the traced constructors (tracing/constructors.py). The modules
that call `trace.trace` import it; `import tracegrad` does not, so start-up stays lazy.

- `operands.py`: what a handler makes of its arguments (values, weak Python numbers, axes);
- `ufuncs.py` and `scipy_special.py`, `elementwise.py`, `reductions.py`, `products.py`;
- `shapes.py`, `indexing.py` (basic indices), `gathers.py` (x[index] in full, take),
  `scatters.py` (x[index] = value in full, np.put_along_axis);
- `manipulation.py`, `diagonals.py`, `scans.py`, `sorting.py`: the array-manipulation functions.
- `nanfunctions.py` (the NaN-ignoring reductions and scans), `statistics.py` (cov, corrcoef),
  `interpolation.py` (searchsorted, interp), `signals.py` (convolve, correlate, unwrap),
  `fft.py` (np.fft's transforms and shifts).
"""

from __future__ import annotations

from ..linalg import functions as linalg_functions  # noqa: F401 (np.linalg's handlers)
from ..linalg import general as linalg_general  # noqa: F401 (np.linalg.eig, eigvals)
from ..tracing import constructors  # noqa: F401 (the traced constructors, a hook of trace())
from ..tracing import random_draws  # noqa: F401 (random draws recorded, a hook of trace())
from ..tracing import indexed_arrays  # noqa: F401 (plain arrays indexed by traced values)
from . import (  # noqa: F401 (each registers its handlers)
    diagonals,
    elementwise,
    fft,
    gathers,
    indexing,
    interpolation,
    manipulation,
    nanfunctions,
    operands,
    products,
    reductions,
    scans,
    scatters,
    scipy_special,
    shapes,
    signals,
    sorting,
    statistics,
    ufuncs,
)
