"""Probes stopped part-way keep what they measured (issue #38, "Probes that report as they go").

A probe measures inside :func:`catch_signals`: SIGINT or SIGTERM then raise :class:`Interrupted`
in its main thread (Python runs signal handlers there, between bytecodes: the signal module's
documentation), so its ``finally`` blocks run (the run in progress killed with its workers,
private temporary folders removed), which SIGTERM's default action would skip. The probe then
calls :func:`hold_signals` (a second signal must not cut its partial files short), prints and
writes what it measured, marked partial, and exits with :func:`watchdog.exits.of_signal`.
Used by ``bench``, ``autotune``, ``seed-check`` (:mod:`probes.bench.commands`) and
``hook-cost`` (:mod:`probes.hook_cost`).
"""

from __future__ import annotations

import signal
from typing import Any, Dict

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (``signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        """``SIGINT`` or ``SIGTERM``."""
        return signal.Signals(self.signum).name


def _interrupt(signum, _frame) -> None:
    raise Interrupted(signum)


def catch_signals() -> Dict[int, Any]:
    """SIGINT and SIGTERM raise :class:`Interrupted` from now on; returns the handlers they had
    (for :func:`restore`). Call from the main thread (``signal.signal`` raises ValueError
    elsewhere)."""
    return {sig: signal.signal(sig, _interrupt) for sig in SIGNALS}


def hold_signals() -> None:
    """SIGINT and SIGTERM are ignored from now on: what was measured is being written."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def restore(previous: Dict[int, Any]) -> None:
    """The handlers :func:`catch_signals` returned, back in place."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
