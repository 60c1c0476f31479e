"""Diagnosis: rules read :class:`~watchdog.types.Facts` and return findings; the engine
runs them all and ranks what fired. Adding a failure class is adding one rule."""

from .engine import RULES, diagnose, rule

__all__ = ["RULES", "diagnose", "rule"]
