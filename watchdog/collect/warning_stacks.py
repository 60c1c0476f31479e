"""Stacks taken at warnings, kept for a death that leaves none.

A worker or main the OOM killer ends with SIGKILL prints no traceback and no faulthandler dump:
the last word on where it was is what it was doing while its memory grew. When a warning names
processes (``worker_memory_growth``, ``main_memory_growth``, …), :class:`WarningStacks` takes
one py-spy ``--nonblocking`` dump of each, in a thread of its own, so the tick never waits for
it and the job is never paused (``--nonblocking`` reads the target's memory without
``PTRACE_ATTACH``). The crash rules read them from ``Facts.earlier_stacks``.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, Iterable, Optional, Tuple

from ..types import EarlierStack
from . import pyspy

MAX_PIDS = 8  # processes dumped for one warning
TIMEOUT_S = 3.0  # seconds all of one warning's dumps may take


class WarningStacks:
    """The latest stack of each process a warning named (:class:`EarlierStack`), at most one
    dump thread at a time. ``pyspy`` is the binary's path (``None``: nothing is taken). Never
    raises for the job's sake: a dump that fails is simply not kept."""

    def __init__(self, pyspy_path: Optional[str], timeout_s: float = TIMEOUT_S) -> None:
        self._pyspy = pyspy_path
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._kept: Dict[int, EarlierStack] = {}
        self._busy: Optional[threading.Thread] = None

    def take(self, pids: Iterable[int], why: str) -> bool:
        """Start dumping ``pids`` (the first :data:`MAX_PIDS`) for the warning ``why``; ``False``
        when nothing was started (no py-spy, no pid, a dump still running)."""
        chosen = list(dict.fromkeys(pids))[:MAX_PIDS]
        if self._pyspy is None or not chosen:
            return False
        with self._lock:
            if self._busy is not None and self._busy.is_alive():
                return False
            self._busy = threading.Thread(
                target=self._dump, args=(chosen, why), name="dlwatch-warning-stacks", daemon=True
            )
            self._busy.start()
        return True

    def _dump(self, pids: list, why: str) -> None:
        wall = time.time()
        try:
            # every pid read --nonblocking (the disk-sleep path of dump_all): never paused
            stacks = pyspy.dump_all(pids, self._pyspy, False, self._timeout_s, disk_sleep=pids)
        except Exception:  # a watchdog fault must not end the watch
            return
        with self._lock:
            for pid, st in stacks.items():
                if st.ok and st.threads:
                    self._kept[pid] = EarlierStack(pid, wall, why, st)

    def wait(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` seconds for a dump under way (before a report reads them)."""
        busy = self._busy
        if busy is not None:
            busy.join(timeout_s)

    def taken(self) -> Tuple[EarlierStack, ...]:
        """The kept stacks, oldest first."""
        with self._lock:
            return tuple(sorted(self._kept.values(), key=lambda e: e.wall))
