"""`python3 -m tracegrad.cli ...`, as before the command became a package (and `-m tracegrad`)."""

import sys

from tracegrad.cli import main

sys.exit(main())
