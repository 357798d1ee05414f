"""`python3 -m tracegrad ...` is the `tracegrad` command."""

import sys

from tracegrad.cli import main

sys.exit(main())
