"""``python -m gnnflow.cli``: the ``gnnflow`` command."""

import sys

from gnnflow.cli import main

sys.exit(main())
