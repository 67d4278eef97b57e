"""``python -m remprop``: the same command line as the ``remprop`` script."""
import sys

from remprop.cli import main

if __name__ == "__main__":
    sys.exit(main())
