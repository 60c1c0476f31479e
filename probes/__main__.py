"""``python -m probes repro …`` is ``dlwatch probe repro …``."""

import sys

from .cli import main

sys.exit(main())
