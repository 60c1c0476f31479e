"""Diagnosis: rules read :class:`~watchdog.types.Facts` and return findings; the engine
runs them all and ranks what fired. Adding a failure class is adding one rule (in
``hangs/`` (a module per family), ``crashes/`` (a module per failure family), ``live.py``, ``data.py`` or
``throughput.py``) with its reproduction or fixture."""

from . import crashes, data, hangs, live, throughput  # noqa: E402,F401  (register the catalogue)
from .engine import RULES, diagnose, rule

__all__ = ["RULES", "diagnose", "rule"]
