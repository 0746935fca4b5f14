"""``python -m graphsurgeon.cli``: the ``gsurg`` command."""

import sys

from graphsurgeon.cli import main

if __name__ == "__main__":
    sys.exit(main())
