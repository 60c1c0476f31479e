"""Waits on the dead (issue #34, section 2): workers that poll or spin for something only a
process of the job could do, and that process has ended. Two shapes are told here, each from
facts dlwatch read itself, never from the job's word:

* a **lock file whose holder is gone**: a soft lock (tox-dev/filelock's ``SoftFileLock``, a
  hand-written ``O_CREAT | O_EXCL`` file) names its holder's pid in the file; the release
  deletes the file. When that pid was a process of this job and has ended (its exit record,
  :class:`~watchdog.types.ExitRecord`, or the timeline saw it and the lock file names it while
  no process has that pid now), the delete the workers poll for will not come from it;
* a **spin on a non-blocking queue get** (``get_nowait()``, ``get(False)``, ``get(timeout=0)``
  in a loop that catches ``queue.Empty``) while a process of the job other than main and its
  workers (a decoder, a producer) has ended: nothing it fed will come.

Neither is a proof (NOTE [ Deadlock proof ] in detect/proof.py): from outside, which file or queue
the loop waits for is not read (locals are off by default), the loop may give up, and anyone
may delete a lock file. So the hang stays suspected; the cause is said with the confidence its
evidence carries (``strongly supported`` when the lock file names a process of this job that
ended, ``likely`` for a spin while a helper ended), and the report names the process, when it
ended and how (exit code, signal, or that no record of it was kept).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from .. import frames
from ..detect import mp_helper
from ..types import ExitRecord, Facts, Frame, LockFile
from .common import polling_of, worker_views

# How sure a lock file naming an ended process of the job makes the cause, and a spin on a
# non-blocking get while a helper of the job ended (CAUSE_WORDS in report.py: strongly
# supported from 0.9, likely from 0.7).
LOCK_FILE_CONFIDENCE = 0.9
# The same without a sign in the worker's stack or code that its poll takes a soft lock.
UNTIED_LOCK_CONFIDENCE = 0.8
_SOFT_LOCK = re.compile(r"\bO_EXCL\b|\bSoftFileLock\(")
SPIN_CONFIDENCE = 0.85
_NON_BLOCKING_GET = frames.NON_BLOCKING_GET
BOUND_THE_WAIT = "DataLoader(..., timeout=<seconds>) makes main fail instead of hanging."
# What a lock file's holder state says (LockFile.holder), for a line of ours.
_ENDED = {"gone": "no process has that pid now", "zombie": "that process has ended (a zombie nobody reaped)"}


@dataclass(frozen=True)
class DeadEnd:
    """What :func:`dead_end` adds to a ``worker_stuck`` finding: the cause's ``confidence``,
    ``evidence`` lines, the ``remedy``, and the ``location`` (``file:line``) to point at when
    another line than the stack's is the one to change (a spin's non-blocking get, wherever in
    its loop the stack caught it)."""

    confidence: float
    evidence: Tuple[str, ...]
    remedy: str
    location: Optional[str] = None


def _clock(wall: float) -> str:
    """``HH:MM:SS UTC`` of a wall-clock time (seconds since the epoch)."""
    return time.strftime("%H:%M:%S UTC", time.gmtime(wall))


def _cmd(cmdline: Sequence[str], name: str) -> str:
    from .. import redact
    from ..text import one_line

    return one_line(" ".join(redact.cmdline(tuple(cmdline))) or name)[:80]


def _ended(rec: ExitRecord, now_wall: float) -> str:
    """``pid N (cmd) was killed by signal 9 (SIGKILL) at 12:00:03 UTC, 9 s before the
    examination`` for an exit record."""
    return (
        f"pid {rec.pid} ({_cmd(rec.cmdline, rec.name)}), a process of the job other than main and its workers, "
        f"{rec.how()} between {_clock(rec.last_seen_wall)} and {_clock(rec.ended_wall)} (it was last seen alive "
        f"{max(0.0, now_wall - rec.last_seen_wall):.0f} s before the examination)"
    )


def _record_of(facts: Facts, lock: LockFile) -> Optional[ExitRecord]:
    """The exit record of the process ``lock`` names: its pid, and the same process when the
    lock file's holder is a zombie whose start is known; the newest such record."""
    for rec in reversed(facts.sample.exits):
        if rec.pid == lock.pid and (lock.holder_start_ticks is None or rec.start_ticks == lock.holder_start_ticks):
            return rec
    return None


def _seen_in_job(facts: Facts, pid: int) -> Optional[float]:
    """When (``time.time()`` seconds) the timeline last held ``pid`` as a process of the job, or
    ``None`` when it never did."""
    last = None
    for s in facts.timeline:
        if s.process(pid) is not None:
            last = s.wall
    return last


def _job_start(facts: Facts) -> Optional[float]:
    main = facts.sample.main
    return main.create_time if main is not None else None


def lock_file_dead_end(facts: Facts, pids: Sequence[int]) -> Optional[DeadEnd]:
    """For workers ``pids`` that poll (:func:`common.polling_of`) or wait with a timeout: the
    lock files of the job (``Facts.lock_files``) whose holder pid is a process of this job that
    ended (an exit record of it, or the timeline held it and no live process has its pid now),
    newest first; ``None`` when there is none. A lock file that names a live process, a pid
    reused since, or another host's pid that this job never ran says nothing here."""
    if not any(polling_of(facts, pid) is not None for pid in pids):
        return None
    now = facts.sample.wall
    lines: List[str] = []
    first: Optional[Tuple[LockFile, str]] = None
    for lock in facts.lock_files:
        if lock.holder not in _ENDED:
            continue
        rec = _record_of(facts, lock)
        seen = _seen_in_job(facts, lock.pid) if rec is None else rec.last_seen_wall
        if seen is None:
            continue  # not a process this job was seen to run: an earlier run's, or another host's
        alive = facts.sample.process(lock.pid)
        if alive is not None and alive.state != "Z":
            continue  # the timeline's latest sample holds it alive: not ended
        who = (
            _ended(rec, now)
            if rec is not None
            else (
                f"pid {lock.pid}, a process of the job last seen alive {max(0.0, now - seen):.0f} s before the "
                f"examination; {_ENDED[lock.holder]}"
            )
        )
        start = _job_start(facts)
        written = f"written at {_clock(lock.written_wall)}" + (
            ", while the job ran" if start is not None and lock.written_wall >= start else ""
        )
        lines.append(
            f"lock file {lock.path} names pid {lock.pid} as its holder ({written}); {who}: the holder of the lock "
            "is gone and never deleted the file (a soft lock is released only by deleting it)"
        )
        if first is None:
            first = (lock, rec.how() if rec is not None else f"has ended ({_ENDED[lock.holder]})")
    if first is None:
        return None
    lock, how = first
    site = soft_lock_site(facts, pids)
    lines = lines[:3] + [
        site
        if site is not None
        else "which file the workers poll for is not read from outside, and their code near the poll shows no soft "
        "lock (no O_EXCL create, no filelock frame)"
    ]
    remedy = (
        f"The workers poll to take the lock file {lock.path}, and its holder, pid {lock.pid}, {how}: it will never "
        "delete the file, nothing else releases a soft lock, so the poll can only end if someone deletes it. "
        f"Check that pid {lock.pid} is gone, then delete the file to unblock this run; fix why it ended; and use a "
        "lock the kernel releases when its holder dies (filelock.FileLock, fcntl.flock) or one that breaks a stale "
        "holder (filelock's SoftFileLock does so on the same host), and acquire with a timeout "
        "(lock.acquire(timeout=<seconds>) raises). " + BOUND_THE_WAIT
    )
    return DeadEnd(LOCK_FILE_CONFIDENCE if site is not None else UNTIED_LOCK_CONFIDENCE, tuple(lines), remedy)


def soft_lock_site(facts: Facts, pids: Sequence[int]) -> Optional[str]:
    """Where a polling worker of ``pids`` takes a soft lock, as its stack and source show it:
    a frame of tox-dev/filelock, else a line at or up to ``ENCLOSING_LINES`` above its user frame
    that creates a file exclusively (``O_EXCL``) or builds a filelock lock; ``None`` when neither
    is seen (the poll may wait for something else than the lock file)."""
    for v in worker_views(facts):
        if v.pid not in pids or v.loop is None or polling_of(facts, v.pid) is None:
            continue
        lib = next((f for f in v.loop.frames if not f.native and "/filelock/" in f.file.replace("\\", "/")), None)
        if lib is not None:
            return (
                f"worker pid {v.pid} polls inside filelock ({frames.short_path(lib.file)}:{lib.line} in "
                f"{lib.function}): a soft lock's acquire"
            )
        u = v.user
        if u is None or u.native:
            continue
        for line in range(u.line, max(0, u.line - frames.ENCLOSING_LINES), -1):
            text = facts.source(u.file, line)
            if text is not None and _SOFT_LOCK.search(text):
                return (
                    f"worker pid {v.pid} polls in code that takes a soft lock: {frames.short_path(u.file)}:{line}: "
                    f"`{text.strip()}`"
                )
    return None


def _spin_line(facts: Facts, frame: Optional[Frame]) -> Optional[Tuple[int, str]]:
    """The line at or up to :data:`~watchdog.frames.ENCLOSING_LINES` above ``frame`` (same file,
    as read at report time) that gets from a queue without blocking, with its number; ``None``
    when none does."""
    if frame is None or frame.native:
        return None
    for line in range(frame.line, max(0, frame.line - frames.ENCLOSING_LINES), -1):
        text = facts.source(frame.file, line)
        if text is not None and _NON_BLOCKING_GET.search(text):
            return line, text.strip()
    return None


def spin_dead_end(facts: Facts, pids: Sequence[int]) -> Optional[DeadEnd]:
    """For workers ``pids`` whose loop thread, in the Dataset, gets from a queue without
    blocking (the line is read at or above the user's frame, or the stack is inside
    ``get_nowait``) while a ``multiprocessing`` process of the job other than main and its
    workers has ended (``Sample.exits``, :func:`detect.mp_helper`: what could feed a
    multiprocessing queue): the ended processes, newest first; ``None`` otherwise."""
    exits = [rec for rec in facts.sample.exits if mp_helper(facts.sample, rec)]
    if not exits:
        return None
    spins = []
    for v in worker_views(facts):
        if v.pid not in pids or v.loop is None:
            continue
        hit = _spin_line(facts, v.user)
        if hit is None and frames.in_non_blocking_get(v.loop) and v.user is not None:
            hit = (v.user.line, facts.source(v.user.file, v.user.line) or "")
        if hit is not None and v.user is not None:
            spins.append((v, hit))
    if not spins:
        return None
    now = facts.sample.wall
    recent = sorted(exits, key=lambda r: -r.ended_wall)[:3]
    v, (line, text) = spins[0]
    assert v.user is not None
    at = f"{frames.short_path(v.user.file)}:{line}"
    lines = [
        f"worker pid {w.pid}: its loop gets from a queue without blocking and tries again at "
        f"{frames.short_path(w.user.file)}:{n}: `{t}` (a spin: it never waits for a put, so it looks busy, not stuck)"
        for w, (n, t) in spins
        if w.user is not None
    ]
    lines += [_ended(rec, now) + ": if it fed that queue, what it was to put will never come" for rec in recent]
    head = recent[0]
    why = (
        " (SIGKILL leaves no traceback; the kernel's OOM killer ends a process so: check `dmesg` or the cgroup's "
        "memory.events)"
        if head.signal == 9
        else ""
    )
    remedy = (
        f"The workers spin on a non-blocking get at {at}, and pid {head.pid}, a process of the job that could feed "
        f"that queue (a decoder, a producer), {head.how()}: what it was to put will never come, however long they "
        f"spin. Fix why it ended{why}; in the loop, get with a timeout (queue.get(timeout=<seconds>)) and check that "
        "the producer is alive (Process.is_alive()) between tries, raising when it is not. " + BOUND_THE_WAIT
    )
    return DeadEnd(SPIN_CONFIDENCE, tuple(lines), remedy, f"{v.user.file}:{line}")


def dead_end(facts: Facts, pids: Sequence[int]) -> Optional[DeadEnd]:
    """What ``worker_stuck`` adds for workers ``pids`` that wait on the dead: a lock file whose
    holder ended (:func:`lock_file_dead_end`), else a spin on a non-blocking get while a
    helper of the job ended (:func:`spin_dead_end`); ``None`` for neither."""
    return lock_file_dead_end(facts, pids) or spin_dead_end(facts, pids)
