"""The crash rule of ``DataLoader(timeout=N)`` that expired (``loader_timeout``): main raised
"DataLoader timed out after N seconds" (``_try_get_data`` in torch/utils/data/dataloader.py,
``StderrFacts.timeout``); the workers' CPU time and run-queue wait over the timeout's window
(``/proc/PID/stat``, ``/proc/PID/schedstat``) say whether they were busy or stuck."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ...collect.stderr_facts import stderr_facts
from ...types import SEVERITY_CRASH, Facts, Fix, ProcId
from ..common import DOC_DATALOADER
from ..engine import Finding, rule
from .shared import CRASH, exit_clause


def _timeout_fired_at(facts: Facts, timeout_s: float) -> Optional[float]:
    """When main's ``DataLoader(timeout=…)`` fired (``time.monotonic()``, the clock of the
    timeline too): ``timeout_s`` after main last entered ``__next__`` without a batch (the
    inside view's ``waiting_since`` of main's latest iterator), or ``None`` unknown."""
    main = facts.sample.main
    views = [
        v
        for v in (facts.inside.loaders if facts.inside else ())
        if (main is None or v.pid == main.pid) and v.waiting_since is not None
    ]
    return views[-1].waiting_since + timeout_s if views and views[-1].waiting_since is not None else None


def _workers_cpu_s(facts: Facts, window_s: float, end: Optional[float] = None) -> Tuple[Optional[float], int]:
    """CPU seconds all workers used in the ``window_s`` before ``end`` (the timeline's last
    sample when ``None``), and how many workers were seen then."""
    if not facts.timeline:
        return None, 0
    if end is None:
        end = facts.timeline[-1].t_mono
    recent = [s for s in facts.timeline if end - window_s <= s.t_mono <= end + 1.0]
    if len(recent) < 2:
        return None, 0
    total, pids = 0.0, set()
    first: Dict[ProcId, float] = {}  # CPU seconds at the window's start
    for s in recent:
        for w in s.workers:
            first.setdefault(w.ident, w.cpu_s)
            pids.add(w.pid)
    last = {}
    for s in recent:
        for w in s.workers:
            last[w.ident] = w.cpu_s
    total = sum(last[k] - first[k] for k in last)
    return total, len(pids)


def _workers_runq_s(facts: Facts, window_s: float, end: Optional[float] = None) -> float:
    """Seconds the workers' main threads waited runnable for a CPU in the same window as
    :func:`_workers_cpu_s` (``ProcessSample.runq_wait_s``, ``/proc/PID/schedstat``; a worker
    not read at both ends counts 0): on a loaded machine a computing worker gets little CPU,
    but it is runnable all along (issue #34)."""
    if end is None:
        end = facts.timeline[-1].t_mono if facts.timeline else 0.0
    first: Dict[ProcId, float] = {}
    last: Dict[ProcId, float] = {}
    for s in facts.timeline:
        if end - window_s <= s.t_mono <= end + 1.0:
            for w in s.workers:
                if w.runq_wait_s is not None:
                    first.setdefault(w.ident, w.runq_wait_s)
                    last[w.ident] = w.runq_wait_s
    return sum(last[k] - first[k] for k in last)


# The timeout ``dlwatch verify`` tries for a loader_timeout of busy workers: this many times the
# one that fired, and at least TIMEOUT_FIX_MIN_S seconds.
TIMEOUT_FIX_FACTOR, TIMEOUT_FIX_MIN_S = 4.0, 60.0


@rule("loader_timeout", SEVERITY_CRASH, 6, CRASH)
def loader_timeout(facts: Facts) -> Optional[Finding]:
    """``DataLoader(timeout=N)`` expired: main raised "DataLoader timed out after N seconds"
    (``_try_get_data`` in dataloader.py). Busy workers mean the timeout is shorter than a batch
    takes; quiet workers mean one was stuck and the timeout did its job."""
    err = stderr_facts(facts)
    m = err.timeout
    if m is None:
        return None
    timeout_s = m.seconds
    fired = _timeout_fired_at(facts, timeout_s)
    cpu, workers = _workers_cpu_s(facts, timeout_s, fired)
    if cpu is None and fired is not None:
        cpu, workers = _workers_cpu_s(facts, timeout_s)
        fired = None
    evidence = [f"stderr: {m.line}"]
    waited = _workers_runq_s(facts, timeout_s, fired) if cpu is not None else 0.0
    busy = cpu is not None and workers and cpu + waited >= 0.25 * timeout_s
    fix = Fix(loader=(("timeout", max(TIMEOUT_FIX_MIN_S, TIMEOUT_FIX_FACTOR * timeout_s)),)) if busy else None
    if cpu is not None:
        evidence.append(
            f"the {workers} worker(s) used {cpu:.1f} s of CPU"
            + (f" and waited {waited:.1f} s runnable for one (a loaded machine)" if waited >= 0.05 * timeout_s else "")
            + f" in the {timeout_s:g} s before the timeout fired"
            + (
                " (main waited for that batch from then on: the inside view)"
                if fired is not None
                else " (taken as the last of the timeline: when main began to wait is not known)"
            )
            + exit_clause(facts)
        )
    if busy:
        summary = (
            f"DataLoader(timeout={timeout_s:g}) fired while the workers were busy computing a batch: the timeout is "
            "shorter than a batch takes."
        )
        remedy = (
            f"Raise DataLoader(timeout=…) above the slowest batch (more than {timeout_s:g} s here, with margin for "
            "load), or make batches cheaper (smaller batch_size, lighter transforms, more workers if CPUs allow). "
            "Nothing was deadlocked."
        )
    else:
        summary = (
            f"DataLoader(timeout={timeout_s:g}) fired while the workers did no work: a worker was stuck, and the "
            "timeout turned the hang into this error."
        )
        remedy = (
            "The timeout did its job: find what the worker waited on (a storage or network call without a timeout, a "
            "lock); run under `dlwatch run` with stall_timeout_s below the DataLoader timeout to get the worker's "
            "stack before it fires."
        )
    return Finding(
        confidence=0.85 if cpu is not None else 0.7,
        summary=summary,
        evidence=tuple(evidence),
        remedy=remedy,
        pids=tuple(w.pid for w in facts.sample.workers),
        location=err.location,
        docs=(DOC_DATALOADER,),
        fix=fix,
    )
