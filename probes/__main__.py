"""``python -m probes repro …`` is ``dlwatch probe repro …``."""

import sys

from probes.cli import main

sys.exit(main())
