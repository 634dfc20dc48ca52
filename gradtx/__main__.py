"""`python -m gradtx`: a shim to the command line in `gradtx.cli`."""

import sys

from .cli import main as main

if __name__ == "__main__":
    sys.exit(main())
