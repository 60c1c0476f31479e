"""Waits on the dead, proven (issue #34, section 2): a ``multiprocessing.Manager()`` lock whose
holder has ended, so that no live process of the job can ever release it.

The argument is NOTE [ Manager lock proof ] in watchdog/detect/manager_proof.py: every thread of main,
the workers and the manager waits for a thread of that same set (``manager_proof.closed_wait``),
and a process of the job other than these, seen alive after the manager started, has ended (its
:class:`~watchdog.types.ExitRecord`): whoever holds the lock (a live process, all of which wait,
or that one) can never release it; the ended process is named, with how and when it ended (it is
the likely holder, not a proven one: a Manager lock keeps no owner to read).
"""

from __future__ import annotations

import time
from typing import Optional

from ..types import ExitRecord, Proof, ProofKind, ProofLink
from . import manager_proof
from .manager_proof import ended_others, possible_holders

__all__ = ["ended_others", "ended_text", "possible_holders", "prove_manager_lock"]


def ended_text(r: ExitRecord, now_mono: float) -> str:
    """How and when ``r``'s process ended, for a proof's line: ``was killed by signal 9
    (SIGKILL); last seen alive at 12:00:01 UTC, found ended at 12:00:02 UTC (40 s before this
    look)`` (``now_mono``: the look's sample, ``time.monotonic()`` seconds)."""
    ago = max(0.0, now_mono - r.ended_mono)
    stamp = time.strftime("%H:%M:%S", time.gmtime(r.last_seen_wall))
    found = time.strftime("%H:%M:%S", time.gmtime(r.ended_wall))
    return f"{r.how()}; last seen alive at {stamp} UTC, found ended at {found} UTC ({ago:.0f} s before this look)"


def prove_manager_lock(reads: manager_proof.ManagerReads) -> Optional[Proof]:
    """A Manager lock whose holder ended (NOTE [ Manager lock proof ] in manager_proof.py): the
    :func:`~watchdog.manager_proof.closed_wait` of main, the workers and the manager, and a
    process of the job that lived beside the manager has ended; ``None`` when any step fails.

    ``reads``: :class:`~watchdog.detect.manager_proof.ManagerReads`.

    Returns a :class:`~watchdog.types.Proof` of kind ``waits_on_dead`` whose ``pids`` are main,
    the workers and the manager; its links name every thread's wait and the ended process(es).
    """
    sample = reads.sample
    closed = manager_proof.closed_wait(reads)
    if closed is None:
        return None
    ended = possible_holders(sample, closed.manager)
    if not ended:
        return None  # no process of the job ended: a cycle among the living (manager_proof.prove_manager_cycle)
    manager = closed.manager
    links = list(closed.links)
    for r in ended[:3]:
        links.append(ProofLink(r.pid, None, f"ended process ({r.name})", ended_text(r, sample.t_mono)))
    gone = "; ".join(f"pid {r.pid} {r.how()}" for r in ended[:3])
    conclusion = (
        f"the multiprocessing.Manager lock the workers wait for is held, and no live process of the job can ever "
        f"release it: every thread of main, the workers and the manager (pid {manager}) waits with no timeout (or in "
        f"a loop that releases nothing) for a thread of this same set, so whoever holds the lock, one of them or "
        f"a process that has ended, can never release it; a process of the job that lived beside the manager has "
        f"ended ({gone}): a Manager lock keeps no owner, so one its holder did not release stays held"
    )
    return Proof(ProofKind.WAITS_ON_DEAD, closed.members, tuple(links), conclusion)
