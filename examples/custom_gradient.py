"""The custom-gradient example, runnable as a file:

    python3 examples/custom_gradient.py [--backend numpy|cpu|cuda] [--size N] [--steps N]
        [--plot FILE.png] [--quiet]

Its code is in tracegrad/examples/custom_gradient.py, so that `tracegrad run custom-gradient` works from an
installed package too.
"""

import sys

from tracegrad.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "custom-gradient", *sys.argv[1:]]))
