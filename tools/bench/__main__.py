"""``python -m tools.bench``: see :mod:`tools.bench.cli`."""

import sys

from tools.bench.cli import main

sys.exit(main())
