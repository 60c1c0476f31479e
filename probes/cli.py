"""The ``probe`` commands: ``dlwatch probe repro NAME|--all``, ``bench``, ``autotune``,
``seed-check``, ``rhythm`` and ``hook-cost`` (also ``python -m probes …``)."""

from __future__ import annotations

import sys
from typing import List, Optional

COMMANDS = ("repro", "bench", "autotune", "seed-check", "rhythm", "hook-cost")


def main(argv: Optional[List[str]] = None) -> int:
    """Dispatch ``repro`` with the remaining arguments; 2 for an unknown command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"dlwatch: error: probe command must be one of: {', '.join(COMMANDS)} (see `dlwatch probe COMMAND --help`)", file=sys.stderr)
        return 2
    if argv[0] == "repro":
        from . import repro

        return repro.main(argv[1:])
    if argv[0] == "hook-cost":
        from . import hook_cost

        return hook_cost.main(argv[1:])
    if argv[0] == "rhythm":
        from . import rhythm

        return rhythm.main(argv[1:])
    from .bench import commands

    return commands.main(argv[0], argv[1:])
