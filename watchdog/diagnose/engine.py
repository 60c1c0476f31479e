"""The rule registry and ranking.

A rule is a function ``(Facts) -> Diagnosis | None`` registered with :func:`rule` and a
``rank``: when several fire, the one that explains the others comes first (a worker blocked
on an inherited lock explains main waiting for data), then higher confidence. Every fired
rule is listed. ``unknown`` is added when no hang or crash rule fired.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from ..types import MODE_HANG, SEVERITY_WARNING, Diagnosis, Facts

Rule = Callable[[Facts], Optional[Diagnosis]]
RULES: List[Tuple[int, str, Rule]] = []


def rule(rank: int) -> Callable[[Rule], Rule]:
    """Register a rule; lower ``rank`` explains more and is listed first."""

    def register(fn: Rule) -> Rule:
        RULES.append((rank, fn.__name__, fn))
        RULES.sort(key=lambda r: r[0])
        return fn

    return register


def diagnose(facts: Facts) -> Tuple[Diagnosis, ...]:
    """Run every rule on ``facts``; the findings, most likely first. Never empty for a hang
    (``unknown`` is the fallback); may be empty for a crash or a live look."""
    from . import hangs  # the fallback rule lives there

    fired = []
    for rank, _name, fn in RULES:
        found = fn(facts)
        if found is not None:
            fired.append((rank, -found.confidence, found))
    fired.sort(key=lambda x: (x[0], x[1]))
    found = tuple(d for _, _, d in fired)
    if facts.mode == MODE_HANG and not any(d.severity != SEVERITY_WARNING for d in found):
        found = (hangs.unknown(facts),) + found
    return found
