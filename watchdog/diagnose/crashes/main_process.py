"""The crash rule of the job's main process dying of a signal (``main_killed``): the OOM killer
(the memory cgroup's count, main's memory growth), an operator or a scheduler, a native crash
or ``abort()`` (the assertion's words on stderr, ``StderrFacts.assertions``). It fires only
when no worker's death (``StderrFacts.killed``) explains main's end first."""

from __future__ import annotations

from typing import Optional

from ...collect.stderr_facts import stderr_facts
from ...types import SEVERITY_CRASH, Facts
from ..common import (
    DOC_MULTIPROCESSING,
    fit_line,
    last_seen_at,
    max_over_timeline,
    memory_points,
    mib,
    since_last_drop,
)
from ..engine import Finding, rule
from ..loaders import kept_loaders_text, kept_persistent_loaders, live_iterator_evidence
from .memory import memory_age
from .shared import CRASH, loader_site

# Main's memory growth that, read at a crash, counts as the cause of an OOM kill: this much at
# least, fitted this well.
MAIN_GROWTH_MIN_BYTES = 128 * 2**20
MAIN_GROWTH_MIN_R2 = 0.8


@rule("main_killed", SEVERITY_CRASH, 8, CRASH)
def main_killed(facts: Facts) -> Optional[Finding]:
    """The job's main process died of a signal (exit code 128 + N, no Python traceback of its
    own): the OOM killer (SIGKILL, with the memory cgroup's count and main's memory growth),
    an operator or a scheduler (SIGKILL without an OOM record; SIGTERM, which the OOM killer
    never sends), a native crash (SIGSEGV, SIGBUS) or ``abort()`` (SIGABRT: the assertion on
    stderr). Workers' deaths explain main's own errors first (:func:`worker_killed`)."""
    import signal as signals

    code = facts.exit_code
    err = stderr_facts(facts)
    if code is None or not 128 < code < 128 + 65 or err.killed:
        return None
    try:
        name = signals.Signals(code - 128).name
    except ValueError:
        name = f"signal {code - 128}"
    main = facts.sample.main
    pid = main.pid if main is not None else None
    evidence = [f"the job's main process{f' (pid {pid})' if pid else ''} ended by {name} (exit code {code})"]
    last = (
        next((p for s in reversed(facts.timeline) for p in [s.process(pid)] if p is not None and p.rss_bytes > 0), None)
        if pid
        else None
    )  # the last sample with its memory (one taken as it was killed has none)
    if last is not None:
        evidence.append(
            f"main pid {pid}: last seen RSS {mib(last.rss_bytes)}, USS {mib(last.uss_bytes)}, private dirty "
            f"{mib(last.dirty_bytes)}" + memory_age(facts, last.pid)
        )
    points = since_last_drop(memory_points(facts, main)) if main is not None else []
    grew = None
    if len(points) >= 4:
        slope, r2 = fit_line(points)
        gained = points[-1][1] - points[0][1]
        span = points[-1][0] - points[0][0]
        if gained >= MAIN_GROWTH_MIN_BYTES and r2 >= MAIN_GROWTH_MIN_R2 and slope > 0:
            grew = (gained, span, slope)
            evidence.append(
                f"main grew steadily: +{mib(gained)} of memory it wrote in {span:.0f} s ({slope / 2**20:.1f} MiB/s)"
            )
    oom = bool(facts.oom_kills)
    limit = max_over_timeline(facts, lambda s: s.host.mem_limit_bytes)
    if oom:
        evidence.append(
            f"the job's memory cgroup counted {facts.oom_kills} OOM kill(s) while it was watched"
            + (f", at its limit of {mib(limit)}" if limit else "")
        )
    asserted = list(err.assertions)
    evidence += [f"stderr: {line}" for line in asserted[-2:]]
    seen_at = last_seen_at(facts, pid) if pid else None
    if seen_at is not None:
        evidence.append(seen_at.evidence("main"))
    kept = kept_persistent_loaders(facts) if name == "SIGKILL" and (oom or grew) else None
    if kept is not None:
        evidence += live_iterator_evidence(facts)
        summary = (
            f"The main process was killed by the OOM killer (SIGKILL) while {kept[0]} DataLoader iterators with "
            f"persistent workers ({kept[1]} workers) were alive at once."
        )
        remedy = (
            kept_loaders_text(kept)
            + (f"; together they reached the cgroup's {mib(limit)} limit" if limit else "")
            + ". Check `dmesg | grep -i -e oom -e killed`."
        )
    elif name == "SIGKILL" and (oom or grew):
        summary = f"The main process was killed by the OOM killer (SIGKILL){' as its memory grew' if grew else ''}."
        remedy = (
            "Main's own memory ran out"
            + (f" at the cgroup's {mib(limit)} limit" if limit else "")
            + ": look for what it keeps per step (losses appended without .item() keep their graphs, batches or "
            "outputs kept in a list, a cache that only grows), free it, or raise the limit. Check `dmesg | grep -i "
            "-e oom -e killed`."
        )
    elif name == "SIGKILL":
        summary = "The main process was killed (SIGKILL) with no OOM kill counted: an operator or a scheduler."
        remedy = (
            "Something outside the job sent SIGKILL: a scheduler (Slurm's time or memory limit, a Kubernetes "
            "eviction or liveness probe), an operator, or the host's OOM killer outside this cgroup; check the "
            "scheduler's log and `dmesg | grep -i -e oom -e killed`."
        )
    elif name == "SIGTERM":
        summary = "The main process was ended by SIGTERM, sent from outside the job."
        remedy = (
            "SIGTERM comes from a process (the OOM killer never sends it): a scheduler preempting or ending the job "
            "(Slurm scancel or its time limit, Kubernetes termination), `kill`, or a launcher stopping its ranks. "
            "Check who: the scheduler's log; handle SIGTERM to save a checkpoint."
        )
    elif name == "SIGABRT":
        summary = "The main process aborted (SIGABRT): a native assertion or an uncaught C++ exception."
        remedy = (
            "A native library called abort(): "
            + (f"it said `{asserted[-1]}`; " if asserted else "")
            + "reproduce under `python -X faulthandler` to get the stack, and check the library's version and input."
        )
    else:
        summary = f"The main process died of {name}: a native crash."
        remedy = (
            "A native library in main crashed: reproduce under `python -X faulthandler` (or gdb) to get the native "
            "stack; check the library's version and the data it was given."
        )
    return Finding(
        confidence=0.9 if (oom or name != "SIGKILL") else 0.75,
        summary=summary,
        evidence=tuple(evidence),
        remedy=remedy,
        pids=(pid,) if pid else (),
        location=err.location
        or (f"{seen_at.frame.file}:{seen_at.frame.line}" if seen_at is not None else None)
        or loader_site(facts),
        docs=(DOC_MULTIPROCESSING,),
    )
