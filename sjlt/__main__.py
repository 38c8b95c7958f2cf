"""``python -m sjlt``: the same command line as the ``sjlt`` script."""

import sys

from .cli import main

sys.exit(main())
