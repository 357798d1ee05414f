"""The higher-order example, runnable as a file:

    python3 examples/higher_order.py [--backend numpy|cpu|cuda] [--size N] [--steps N]
        [--plot FILE.png] [--quiet]

Its code is in tracegrad/examples/higher_order.py, so that `tracegrad run higher-order` works from an
installed package too.
"""

import sys
from pathlib import Path

try:
    from tracegrad.cli import main
except ImportError:  # run from a clone without installing: use the package next to this folder
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tracegrad.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "higher-order", *sys.argv[1:]]))
