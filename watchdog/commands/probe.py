"""``dlwatch probe COMMAND ARGS…``: the probes (reproductions and benchmarks) are a client of
the watchdog and need torch (the [probes] extra); this module only finds and hands over to
them. Standard library only: the parser imports it to list the probes' commands."""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import List

from ..exits import Exit


def probes_module(name: str) -> ModuleType:
    """The probes' module ``name``: in a source tree, of the ``probes`` folder beside this
    ``watchdog`` (never a top-level ``probes`` from elsewhere, which is not imported at all);
    installed, of ``watchdog.probes`` (setup.cfg's ``package_dir``).

    Raises:
        ImportError: neither is there, or the module cannot be imported.
    """
    import importlib
    import importlib.util

    # this file is watchdog/commands/probe.py: the tree is the folder that holds watchdog/
    tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        spec = importlib.util.find_spec("probes")
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    if origin and os.path.dirname(os.path.dirname(os.path.abspath(origin))) == tree:
        return importlib.import_module(f"probes.{name}")
    return importlib.import_module(f"watchdog.probes.{name}")


def cmd_probe(probe_args: List[str]) -> int:
    """``dlwatch probe COMMAND ARGS…`` (``probe_args``): :func:`probes.cli.run` runs the command
    and says, in one line with exit code 2, when it or what it needs is not installed."""
    try:
        probes_cli = probes_module("cli")
    except ImportError as e:
        print(f"dlwatch: error: the probes are not installed: {e}", file=sys.stderr)
        return Exit.USAGE
    if not probe_args:
        print("dlwatch: error: name a probe command (see `dlwatch probe --help`)", file=sys.stderr)
        return Exit.USAGE
    return probes_cli.run(probe_args)
