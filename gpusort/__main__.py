"""``python -m gpusort``: the ``gpusort`` command."""

import sys

from gpusort.cli import main

sys.exit(main())
