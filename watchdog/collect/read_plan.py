"""What the next tick reads: a pure decision from the last samples and the watcher's cadence.

The sampler reads what a :class:`ReadPlan` asks (:meth:`~watchdog.collect.sampler.Sampler.sample`);
the watcher keeps one :class:`PlanState`, folds each sample into it (:func:`after_sample`) and
asks for the next plan (:func:`next_plan`). Nothing here reads a file or a clock.

NOTE [ Lean ticks ]
While the inside view shows the loader delivering (a batch or a sample counted at this tick),
the next tick is lean (``ReadPlan.lean``: main's children, ``/dev/shm`` and the available
memory; the last sample's processes kept while main has the same children, and main's loaders'
counters first): a job that delivers is not hung, and what else may move (RSS, descriptors, a
worker's state) waits for the next full sample. While the loader keeps delivering, a tick that
would come less than ``Cadence.skip_span_s`` after the last tick taken is skipped
(``ReadPlan.skip``: nothing read, nothing judged; on a node of 8 ranks the lean ticks were most
of what a rank cost between its looks): ``min(stall_min_s / 4, 2.5 x interval_s)``, so at most
two ticks in a row (2.5 s at the defaults), and a loader that stops is seen at most that span
and one interval later, well within the shortest stall the rhythm rule examines
(``stall_min_s``, NOTE [ Batch rhythm ] in ``watchdog/detect/progress.py``, whose p99 comes
from the loader's own batch times, not from the ticks). A stall is measured from the last tick
that saw a batch, so never longer than it is. No tick is skipped after one where the plan asked
a lean sample and the sampler took a full one (main's children changed, memory short now:
:meth:`Sampler._lean`),
nor after a full one that no lean sample may follow (``Sample.may_lean``: memory short, a
process young or ended at its walk): while that lasts every tick is taken. A full sample
comes at least every ``min(warning_interval_s, stall_timeout_s / 2)``, when a look for warnings
is due, when main gained or lost a child (the sampler's own check), and at the first tick after
one that delivered nothing, so a stall is measured on full ones.

The thread-read cadence (NOTE [ Thread reads ] in ``watchdog/collect/sampler.py`` says what a
thread read costs and what needs it): the next full sample reads no thread while a batch was counted
at this tick, the tree left its CPUs idle (below ``THREADS_CPU_SHARE`` of them used between the
last two full samples, :func:`cpu_share`) and threads were read less than
``stall_timeout_s / 4`` ago: a deadlock proof (NOTE [ Deadlock proof ] in
``watchdog/detect/proof.py``) of a worker whose batches main does not wait for yet needs its
snapshots that often.

Without the inside view (``dlwatch attach`` to a job started without the hook, ``--no-hook``)
no batch is ever counted, and until now every tick read every thread: on a node of 8 ranks of
1 + 8 processes, over a third of the sidecar's CPU (``dlwatch probe overhead --node --mode
attach``). There the workers' own counters stand in for the batch count: while a DataLoader
worker moved between the last two full samples (its ``rchar + wchar`` changed, or it used
``BUSY_SHARE`` of a core or more: every thread of a worker is on the loader's path, so a
process that moved has a thread that moved; an idle worker's 5 s polls use far less), the next
full sample reads threads only when ``stall_timeout_s / 4`` passed since the last read (the
deadlock proof's snapshots, and the stall is only ever judged on a sample that read threads:
``watchdog/watch/watcher.py``), or, while the tree keeps its CPUs busy, when a look for warnings
is due (``cpu_oversubscribed`` counts threads at the samples that read them). Main's process is
no such sign: its other threads (a logger, the training step's) move while its loader waits.
A full sample after which no worker moved reads threads again, so a loader that stops is judged
on per-thread reads from its first still full sample.

Without the inside view, the workers' counters also stand in for the batch count of NOTE [ Lean
ticks ]: while a worker moved between the last two full samples, the ticks between full samples
are lean, so a node's ranks read their processes every ``full_every_s``, not every tick (on 8
ranks x (1 + 8) under ``dlwatch attach``, nearly all of the sidecar's cost was those reads). A
lean sample carries no new evidence: the progress tracker folds nothing from it
(``watchdog/detect/progress.py``) and no stall is judged on it (``watchdog/watch/watcher.py``),
so a loader that stops is seen at the next full sample, at most ``full_every_s`` later, and its
stall is measured from the last full sample that saw a worker move: never longer than it is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from ..config import Config
from ..types import BUSY_SHARE, Sample

# NOTE [ Thread reads ]: while batches flow, threads are read only while the tree used this
# share of its usable CPUs or more. cpu_oversubscribed (watchdog/diagnose/live.py) needs more
# runnable threads than 1.5 x the usable CPUs: they keep the CPUs busy, so the tree uses about
# all of them (less only where other processes take CPUs from the same set).
THREADS_CPU_SHARE = 0.5


@dataclass(frozen=True)
class ReadPlan:
    """What one sample reads.

    Attributes:
        lean: a lean sample when the tree cannot have changed (NOTE [ Lean ticks ]); the
            sampler still takes a full one when main's children changed, a process is young,
            one ended or memory is short.
        threads: a full sample reads every process's threads (NOTE [ Thread reads ]).
        inside: the inside view is read with the sample (its loaders and fetches in the
            :class:`Sample`); an examination's samples read none.
        skip: the tick reads and judges nothing (NOTE [ Lean ticks ]: the loader delivered at
            the last tick taken, less than ``Cadence.skip_span_s`` before it); the next one
            follows :func:`after_skip`.
    """

    lean: bool = False
    threads: bool = True
    inside: bool = False
    skip: bool = False


# The processes, full, with their threads, and no inside view: an examination's samples, dump's.
PROCESSES = ReadPlan()
# The watcher's first tick, and any tick after one that delivered nothing.
FULL_TICK = ReadPlan(inside=True)


# NOTE [ Lean ticks ]: while the loader delivers, ticks are skipped within this many intervals
# of the last one taken (two in a row), and within a quarter of stall_min_s.
SKIP_SPAN_INTERVALS = 2.5


@dataclass(frozen=True)
class Cadence:
    """The settings the plan follows, in seconds: ``interval_s`` between ticks,
    ``full_every_s`` at most between full samples (``min(warning_interval_s, stall_timeout_s /
    2)``), ``look_every_s`` between looks for warnings (``warning_interval_s``, taken on full
    samples), ``threads_every_s`` at most between thread reads (``stall_timeout_s / 4``),
    ``skip_span_s`` after the last tick taken within which a tick is skipped while the loader
    delivers (``min(stall_min_s / 4, SKIP_SPAN_INTERVALS x interval_s)``, NOTE [ Lean ticks ])."""

    interval_s: float
    full_every_s: float
    look_every_s: float
    threads_every_s: float
    skip_span_s: float = 0.0

    @classmethod
    def of(cls, interval_s: float, warning_interval_s: float, stall_timeout_s: float, stall_min_s: float) -> "Cadence":
        """The cadence of a watcher with these settings (seconds)."""
        full_every_s = min(warning_interval_s, stall_timeout_s / 2)
        skip_span_s = min(stall_min_s / 4, SKIP_SPAN_INTERVALS * interval_s)
        return cls(interval_s, full_every_s, warning_interval_s, stall_timeout_s / 4, skip_span_s)

    @classmethod
    def for_config(cls, config: Config) -> "Cadence":
        """The cadence of a watcher with ``config``'s settings."""
        return cls.of(config.interval_s, config.warning_interval_s, config.stall_timeout_s, config.stall_min_s)


@dataclass(frozen=True)
class PlanState:
    """What the plan remembers: when (``time.monotonic()`` seconds) the last full sample and
    the last thread read were taken, that full sample, whether the tree used
    ``THREADS_CPU_SHARE`` or more of its usable CPUs between the last two full samples
    (``True`` when not known), whether a DataLoader worker of a sample without the inside
    view moved between them (:func:`workers_moved`; ``False`` when not known), and when the
    last sample was taken that a skipped tick may follow (``None``: the plan asked a lean sample
    and the sampler took a full one, or no lean one may follow it, NOTE [ Lean ticks ])."""

    full_at: float = float("-inf")
    threads_at: float = float("-inf")
    last_full: Optional[Sample] = None
    cpu_busy: bool = True
    workers_moved: bool = False
    skip_from: Optional[float] = None


def cpu_share(before: Sample, after: Sample, usable_cpus: float) -> Optional[float]:
    """The share of ``usable_cpus`` (CPUs, > 0) the processes of ``after`` used since
    ``before`` (two full samples, ``before`` older): the CPU seconds each process present in
    both gained (``stat`` utime + stime, every thread's), over the seconds between them and
    ``usable_cpus``; ``None`` when they are not at least 0.1 s apart."""
    span = after.t_mono - before.t_mono
    if span < 0.1 or usable_cpus <= 0:
        return None
    was = {p.ident: p.cpu_s for p in before.processes}
    used = sum(max(0.0, p.cpu_s - was[p.ident]) for p in after.processes if p.ident in was)
    return used / span / usable_cpus


def workers_moved(before: Sample, after: Sample) -> bool:
    """Whether a DataLoader worker present in both full samples (``before`` older) moved
    between them: its I/O bytes (``rchar + wchar``) changed, or it used ``BUSY_SHARE``
    of a core or more. ``False`` when they are under 0.1 s apart."""
    span = after.t_mono - before.t_mono
    if span < 0.1:
        return False
    was = {p.ident: p for p in before.workers}
    for p in after.workers:
        q = was.get(p.ident)
        if q is None:
            continue
        if p.cpu_s - q.cpu_s >= BUSY_SHARE * span:
            return True
        if None not in (p.read_chars, p.write_chars, q.read_chars, q.write_chars) and (
            p.read_chars != q.read_chars or p.write_chars != q.write_chars
        ):
            return True
    return False


def usable_cpus(sample: Sample, host_cpus: int) -> float:
    """The CPUs main may use: the least of its affinity and its cgroup's quota, else the
    host's ``host_cpus``."""
    main = sample.main
    limits = [float(x) for x in ((main.cpu_affinity, main.cpu_quota) if main is not None else ()) if x]
    return min(limits or [float(host_cpus)])


def after_sample(state: PlanState, sample: Sample, host_cpus: int, plan: ReadPlan = FULL_TICK) -> PlanState:
    """``state`` with ``sample`` taken by ``plan``: a lean one is dated (``skip_from``); a full
    one is the new ``last_full`` (with its thread read dated), and ``cpu_busy`` is judged
    between it and the last full one (:func:`cpu_share`); a full one where ``plan`` asked a lean
    one, or one that no lean sample may follow (:attr:`Sample.may_lean`), dates no ``skip_from``."""
    skip_from = sample.t_mono if sample.may_lean and not (plan.lean and not sample.lean) else None
    if sample.lean:
        return dataclasses.replace(state, skip_from=skip_from)
    busy, moved = True, False
    if state.last_full is not None and sample.main is not None:
        share = cpu_share(state.last_full, sample, usable_cpus(sample, host_cpus))
        busy = share is None or share >= THREADS_CPU_SHARE
        moved = not sample.loaders and workers_moved(state.last_full, sample)
    return PlanState(
        full_at=sample.t_mono,
        threads_at=sample.t_mono if sample.threads_read else state.threads_at,
        last_full=sample,
        cpu_busy=busy,
        workers_moved=moved,
        skip_from=skip_from,
    )


def next_plan(state: PlanState, cadence: Cadence, t_mono: float, delivered: bool, last_look: float) -> ReadPlan:
    """The plan of the tick after the one that ended at ``t_mono`` (seconds: a slow tick's
    next one comes later), which ``delivered`` (a batch or a sample counted at it) or not;
    ``last_look`` is when warnings were last looked for (a look due at the next tick needs a
    full sample). A tick that would be lean while the loader delivers, within
    ``cadence.skip_span_s`` of ``state.skip_from``, is skipped (NOTE [ Lean ticks ], NOTE [
    Thread reads ])."""
    next_t = t_mono + cadence.interval_s  # about when the next tick samples
    lean = (
        (delivered or state.workers_moved)
        and next_t - state.full_at < cadence.full_every_s
        and next_t - last_look < cadence.look_every_s  # a look is due on a full one
    )
    threads_due = next_t - state.threads_at >= cadence.threads_every_s
    if delivered:
        threads = state.cpu_busy or threads_due
    elif state.workers_moved:  # no inside view: the workers' own counters moved
        threads = threads_due or (state.cpu_busy and next_t - last_look >= cadence.look_every_s)
    else:
        threads = True
    skip = lean and delivered and state.skip_from is not None and next_t - state.skip_from < cadence.skip_span_s
    return ReadPlan(lean=lean, threads=threads, inside=True, skip=skip)


def after_skip(state: PlanState, cadence: Cadence, t_mono: float, last_look: float) -> ReadPlan:
    """The plan of the tick after one skipped at ``t_mono`` (seconds): as after the last tick
    taken, which delivered (NOTE [ Lean ticks ])."""
    return next_plan(state, cadence, t_mono, True, last_look)
