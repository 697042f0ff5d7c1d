"""``python -m fp4graph``: see :mod:`fp4graph.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
