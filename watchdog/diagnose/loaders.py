"""Main's DataLoader iterators alive at once, from the inside view against the timeline: shared
by the crash rules (an OOM kill of several persistent loaders kept alive) and the live
warnings (memory that several persistent loaders' workers hold is no copy-on-read)."""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from .. import frames
from ..types import Facts, LoaderView

# How far back from main's last sample :func:`live_iterators` looks for the most workers alive
# at once, seconds: a job that crashed shuts its remaining workers down as it exits.
LIVE_WINDOW_S = 60.0


def live_iterators(facts: Facts) -> List[Tuple[LoaderView, Tuple[int, ...]]]:
    """Main's DataLoader iterators whose workers were alive at once, with those workers (the
    inside view's ``LoaderView.workers`` against the timeline): at the sample, within
    ``LIVE_WINDOW_S`` before the last one that saw main, where the most of them ran (the
    latest of equals; a crashing main shuts the rest down as it exits). An iterator of
    ``persistent_workers=True`` keeps its workers until it is deleted."""
    main = facts.sample.main
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if main is None or v.pid == main.pid]
    if not views:
        return []
    main_pid = views[-1].pid
    owned = {pid for v in views for pid in v.workers}
    with_main = [s for s in facts.timeline if s.process(main_pid) is not None]
    if not with_main:
        return []
    end = with_main[-1].t_mono
    best: Set[int] = set()
    for s in with_main:
        if s.t_mono >= end - LIVE_WINDOW_S:
            alive = {p.pid for p in s.workers if p.pid in owned}
            if len(alive) >= len(best):
                best = alive
    out = []
    for v in views:
        live = tuple(pid for pid in v.workers if pid in best)
        if live:
            out.append((v, live))
    return out


def kept_persistent_loaders(facts: Facts) -> Optional[Tuple[int, int, str]]:
    """``(iterators, workers, where)`` when several iterators with ``persistent_workers=True``
    were alive at once (:func:`live_iterators`): two or more created at the same line (a new
    loader each epoch, the old ones kept), or three or more anywhere; else ``None``. ``where``
    names the line(s) they were created at."""
    kept = [(v, w) for v, w in live_iterators(facts) if v.setting("persistent_workers") is True]
    if len(kept) < 2:
        return None
    sites: Dict[Optional[Tuple[str, int]], int] = {}
    for v, _ in kept:
        key = (v.site.file, v.site.line) if v.site is not None else None
        sites[key] = sites.get(key, 0) + 1
    repeated = [k for k, n in sites.items() if k is not None and n >= 2]
    if not repeated and len(kept) < 3:
        return None
    where = ", ".join(f"{frames.short_path(f)}:{line}" for f, line in (repeated or [k for k in sites if k]))
    return len(kept), sum(len(w) for _, w in kept), where


def kept_loaders_text(kept: Tuple[int, int, str]) -> str:
    """The words for :func:`kept_persistent_loaders`'s finding, to lead a remedy with."""
    n, workers, where = kept
    return (
        f"{n} DataLoader iterators with persistent workers are alive at once ({workers} workers"
        + (f"; created at {where}" if where else "")
        + "): keep one loader, or `del` the old ones (a DataLoader with persistent_workers=True keeps its iterator "
        "and its workers until the loader itself is deleted; create it once, outside the epoch loop)"
    )


def live_iterator_evidence(facts: Facts) -> List[str]:
    """One line per live iterator (:func:`live_iterators`, at most 8): where and how it was
    made, and its workers still alive."""
    out = []
    for v, alive in live_iterators(facts)[:8]:
        out.append(
            f"the inside view: iterator {v.iterator} of {v.label} "
            f"(persistent_workers={v.setting('persistent_workers')}, epoch {v.epoch}, {v.batches} batch(es)): "
            f"workers {', '.join(map(str, alive))} alive at the last sample"
        )
    return out
