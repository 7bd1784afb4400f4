"""``python -m reference_impl.decoupled``: see :mod:`reference_impl.decoupled.runner`."""

import sys

from reference_impl.decoupled.runner import main

sys.exit(main())
