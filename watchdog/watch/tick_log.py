"""The tick log: one line per tick appended to the file ``DLWATCH_TICK_LOG`` names (``dlwatch
probe overhead`` sets it to measure the ticks); unset, nothing is written and nothing costs."""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Callable, Optional, Sequence, Tuple

from ..types import Sample

# A file to which every tick appends its timing; unset: none.
TICK_LOG = os.environ.get("DLWATCH_TICK_LOG", "")

# [the tick log, opened once and shared by the loop and the examinations' threads; when it was last flushed]
_TICK_FILE: list = []
_TICK_FLUSH_S = 1.0
_TICK_LOCK = threading.Lock()


def timed(tick: Callable[[], None], after: Callable[[], Tuple[Optional[Sample], Sequence[str]]]) -> None:
    """Run ``tick``; with :data:`TICK_LOG` set, log its timing (:func:`log_tick`) from what
    ``after()`` gives once it ran: the latest sample (``None``: none yet) and the reports so far."""
    if not TICK_LOG:
        tick()
        return
    wall, t0, c0, n0 = time.time(), time.perf_counter(), time.thread_time(), len(after()[1])
    tick()
    latest, reports = after()
    n = len(latest.processes) if latest is not None else 0
    lean = latest is not None and latest.lean
    log_tick(wall, time.perf_counter() - t0, time.thread_time() - c0, n, len(reports) - n0, lean)


def log_tick(wall: float, elapsed_s: float, cpu_s: float, processes: int, reports: int, lean: bool) -> None:
    """Append ``WALL ELAPSED_MS CPU_MS PROCESSES REPORTS KIND`` to :data:`TICK_LOG`: when the
    tick began (``time.time()``, seconds), its wall-clock and this thread's CPU time in
    milliseconds, the processes in its sample, the reports it wrote and its sample's kind
    (``lean`` or ``full``, NOTE [ Lean ticks ] in watchdog/collect/read_plan.py). The file is
    opened at the first line and kept open, and written at most every ``_TICK_FLUSH_S`` (and at
    exit): the log measures the ticks, and should cost them neither an open nor a write each.
    A file that cannot be written is ignored."""
    kind = "lean" if lean else "full"
    line = f"{wall:.3f} {elapsed_s * 1e3:.3f} {cpu_s * 1e3:.3f} {processes} {reports} {kind}\n"
    with _TICK_LOCK:
        try:
            if not _TICK_FILE:
                _TICK_FILE.append(open(TICK_LOG, "a", encoding="ascii"))
                _TICK_FILE.append(float("-inf"))
                atexit.register(_flush_ticks)
            _TICK_FILE[0].write(line)
            if wall - _TICK_FILE[1] >= _TICK_FLUSH_S:
                _TICK_FILE[0].flush()
                _TICK_FILE[1] = wall
        except OSError:
            pass


def _flush_ticks() -> None:
    """Write out the tick log's last lines (at exit)."""
    with _TICK_LOCK:
        try:
            _TICK_FILE[0].flush()
        except (OSError, IndexError, ValueError):
            pass
