"""The ode-sensitivity example, runnable as a file:

    python3 examples/ode_sensitivity.py [--backend numpy|cpu|cuda] [--size N] [--steps N] [--plot FILE]
        [--quiet]

Its code is in tracegrad/examples/ode_sensitivity.py, so that
`tracegrad run ode-sensitivity` works from an installed package too.
"""

import sys
from pathlib import Path

try:
    from tracegrad.cli import main
except ImportError:  # run from a clone without installing: use the package next to this folder
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tracegrad.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "ode-sensitivity", *sys.argv[1:]]))
