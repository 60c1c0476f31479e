"""The ``probe`` commands: ``dlwatch probe repro NAME|--all`` (also ``python -m probes repro``)."""

from __future__ import annotations

import sys
from typing import List, Optional

COMMANDS = ("repro",)


def main(argv: Optional[List[str]] = None) -> int:
    """Dispatch ``repro`` with the remaining arguments; 2 for an unknown command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"dlwatch: error: probe command must be one of: {', '.join(COMMANDS)} (see `dlwatch probe repro --help`)", file=sys.stderr)
        return 2
    from . import repro

    return repro.main(argv[1:])
