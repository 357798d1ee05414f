"""The linear-regression example, runnable as a file:

    python3 examples/linear_regression.py [--backend numpy|cpu|cuda] [--size N] [--steps N]
        [--plot FILE.png] [--quiet]

Its code is in tracegrad/examples/linear_regression.py, so that `tracegrad run linear-regression` works from an
installed package too.
"""

import sys

from tracegrad.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "linear-regression", *sys.argv[1:]]))
