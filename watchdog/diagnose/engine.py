"""The rule registry and ranking.

A rule is a function ``(Facts) -> Finding | None`` declared with :func:`rule`: its kind, its
severity, its rank and the modes it applies to. The engine calls a rule only in its modes and
turns its :class:`~watchdog.types.Finding` into a :class:`~watchdog.types.Diagnosis`, filling in
kind, severity and certainty. Every fired rule is listed; the fallback ``unknown``
(:func:`unknown`, here) is added when no hang or crash rule fired during a hang.

NOTE [ Rule ranks ]
When several rules fire, the one that explains the others comes first; then higher
confidence. A finding that a measured figure contradicts (``Finding.contradiction``) ranks
below every finding that agrees with all of them. The table, lower first:

====  ======================  ==========================================================
rank  kind                    why here
====  ======================  ==========================================================
1     shm_exhausted           an exhausted /dev/shm explains lost batches and crashes
1     shm_removed             a deleted shared-memory file explains the same
1     disk_full               a full file system (not /dev/shm) explains a failed write
2     fd_exhausted            exhausted descriptors explain lost batches
2     map_count_exhausted     exhausted memory maps explain a failed mmap
3     worker_start_failed     workers that cannot start explain every later error
4     cuda_in_forked_worker   a specific worker error, before the generic one
5     worker_killed           a worker killed by a signal explains main's error
5     worker_exited           a worker that exited (a code, no signal) explains the same
6     loader_timeout          main's own timeout fired: the cause is the slow batch
7     dataset_error           an exception in the Dataset, re-raised by main
7     collate_error           an exception in collate_fn, re-raised by main
7     worker_init_error       an exception in worker_init_fn, re-raised by main
8     main_killed             main died of a signal, after every cause a worker names
10    fork_inherited_lock     a deadlocked worker explains main waiting for data
11    worker_deadlock         the same, within the worker's own threads
12    pin_memory_stall        main's pin thread, before what waits on it
13    main_thread_deadlock    main's threads wait on each other
14    worker_exec             a worker that became another program never sends its batch
15    worker_blocked_io       a worker blocked in the kernel
18    batch_lost              a lost batch (after the exhaustion that caused it)
20    worker_stuck            a worker stuck in the Dataset for another reason
25    shutdown_hang           main stuck shutting the iterator down
29    uneven_batches          ranks ran out of batches at different counts (uneven shards)
30    stall_outside_loader    main stopped outside the loader
50+   warnings                live findings, in the order of live.py, then data.py, then throughput.py
====  ======================  ==========================================================

A unit test checks that this table and the registered rules agree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, FrozenSet, Iterable, List, Optional, Tuple

from ..text import one_line
from ..types import (
    MODE_CRASH,
    MODE_HANG,
    MODE_LIVE,
    SEVERITY_HANG,
    SEVERITY_WARNING,
    Diagnosis,
    Facts,
    Finding,
    Mode,
    ProofKind,
    Severity,
)
from .common import DOC_MULTI_PROCESS_LOADING, describe, hang_of, location, quiet_text, waiting_main, worker_views

ALL_MODES = frozenset({MODE_HANG, MODE_CRASH, MODE_LIVE})
# Added to the rank of a finding that a measured figure contradicts; its confidence is
# multiplied by CONTRADICTED_CONFIDENCE.
CONTRADICTED_PENALTY = 1000
CONTRADICTED_CONFIDENCE = 0.4


RuleFn = Callable[[Facts], Optional[Finding]]


@dataclass(frozen=True)
class Rule:
    """A registered rule: ``fn`` runs only when the facts' mode is in ``modes``."""

    kind: str
    severity: Severity
    rank: int
    modes: FrozenSet[Mode]
    fn: RuleFn


RULES: List[Rule] = []


def rule(kind: str, severity: Severity, rank: int, modes: Iterable[Mode]) -> Callable[[RuleFn], RuleFn]:
    """Register a rule (see NOTE [ Rule ranks ] for ``rank``)."""

    def register(fn: RuleFn) -> RuleFn:
        RULES.append(Rule(kind, severity, rank, frozenset(modes), fn))
        RULES.sort(key=lambda r: r.rank)
        return fn

    return register


def certainty(facts: Facts, severity: Severity, pids: Tuple[int, ...]) -> str:
    """``proven`` for a hang finding backed by the facts' proof (it covers one of ``pids``, or
    is the loader-level argument); ``suspected`` for any other hang finding; empty otherwise."""
    if severity != SEVERITY_HANG or facts.mode != MODE_HANG:
        return ""
    proof = facts.proof
    if proof is not None and (proof.kind is ProofKind.LOADER_IDLE or set(proof.pids) & set(pids)):
        return "proven"
    return "suspected"


def _one_line(f: Finding) -> Finding:
    """``f`` with its summary, each evidence line, its remedy and its location each on one line:
    a line break or other control character in what the job names (a folder, a file, a process
    name, a command line quoted by a rule) written as its escape (``\\n``, ``\\x1b``;
    :func:`watchdog.text.one_line`). Every output of a diagnosis (report.json, report.txt, the
    summary on stderr, ``dlwatch show``, alerts) then shows that name where it is, on its line,
    and no line of it reads as dlwatch's own (``FORGED: ...`` at the start of a report line)."""
    location = one_line(f.location) if f.location else f.location
    evidence = tuple(one_line(e) for e in f.evidence)
    summary, remedy = one_line(f.summary), one_line(f.remedy)
    if (summary, evidence, remedy, location) == (f.summary, f.evidence, f.remedy, f.location):
        return f
    return replace(f, summary=summary, evidence=evidence, remedy=remedy, location=location)


def _diagnosis(facts: Facts, r: Rule, f: Finding) -> Diagnosis:
    """``f`` as rule ``r`` ranks it: its confidence rounded to 3 places and, when a measurement
    contradicts it, cut to ``CONTRADICTED_CONFIDENCE`` of its own with an evidence line that
    says so; its text each on one line (:func:`_one_line`), whatever names the rule quoted."""
    confidence = round(f.confidence * (CONTRADICTED_CONFIDENCE if f.contradiction else 1.0), 3)
    if f.contradiction:
        f = replace(f, evidence=f.evidence + (f"contradicted by a measurement: {f.contradiction}",))
    f = _one_line(f)
    if confidence != f.confidence:
        f = replace(f, confidence=confidence)
    return Diagnosis(r.kind, r.severity, f, certainty(facts, r.severity, f.pids))


def unknown(facts: Facts) -> Finding:
    """The fallback when no hang or crash rule fired during a hang: the stall and every stack
    are attached."""
    stall, v = hang_of(facts)
    evidence = [waiting_main(facts) if v.in_loader else f"main pid {stall.main_pid}: {v.reason}"]
    for view in worker_views(facts):
        evidence.append(
            f"worker pid {view.pid}: state {view.proc.state}, wchan {view.proc.wchan}, {view.activity.value}, "
            f"{quiet_text(facts, view.pid)}"
            + (f", at {describe(facts, view.pid, view.user or view.top)}" if view.user or view.top else "")
        )
    if facts.pyspy_problem:
        evidence.append(facts.pyspy_problem)
    user = next((view.user for view in worker_views(facts) if view.user is not None), None)
    return Finding(
        confidence=0.2,
        summary=(
            f"The job made no progress for {stall.stall_s:.0f} s and no known cause matched; every stack is attached."
        ),
        evidence=tuple(evidence),
        remedy="Read the stacks below (main's iterating thread first, then each worker's innermost frames).",
        pids=(stall.main_pid,) + tuple(w.pid for w in facts.sample.workers),
        location=location(user),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


# The fallback, ranked after every hang rule; never in RULES: it runs only when none fired.
UNKNOWN = Rule("unknown", SEVERITY_HANG, 99, frozenset({MODE_HANG}), unknown)


def diagnose(facts: Facts) -> Tuple[Diagnosis, ...]:
    """Run every rule of ``facts.mode``; the findings, most likely first. Never empty for a
    hang (:func:`unknown` is the fallback); may be empty for a crash or a live look."""
    fired = []
    for r in RULES:
        if facts.mode not in r.modes:
            continue
        found = r.fn(facts)
        if found is not None:
            rank = r.rank + (CONTRADICTED_PENALTY if found.contradiction else 0)
            fired.append((rank, -found.confidence, _diagnosis(facts, r, found)))
    fired.sort(key=lambda x: (x[0], x[1]))
    out = tuple(d for _, _, d in fired)
    if facts.mode == MODE_HANG and not any(d.severity != SEVERITY_WARNING for d in out):
        out = (_diagnosis(facts, UNKNOWN, unknown(facts)),) + out
    return out
