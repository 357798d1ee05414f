"""The lennard-jones example, runnable as a file:

    python3 examples/lennard_jones.py [--backend numpy|cpu|cuda] [--steps N]
        [--quiet]

Its code is in tracegrad/examples/lennard_jones.py, so that
`tracegrad run lennard-jones` works from an installed package too.
"""

import sys
from pathlib import Path

try:
    from tracegrad.cli import main
except ImportError:  # run from a clone without installing: use the package next to this folder
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tracegrad.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "lennard-jones", *sys.argv[1:]]))
