"""A wake-up that threads and signal handlers may trigger safely.

``threading.Event.set()`` takes the Event's lock. A signal handler runs in the main thread
between bytecodes, possibly while that same thread is inside ``Event.wait()`` holding that
lock, so a handler that calls ``set()`` can deadlock its own thread (seen for real with a burst
of SIGINTs sent to ``dlwatch run``). A self-pipe has no lock: ``os.write`` of one byte to a
non-blocking pipe is safe from any thread and from a handler, and the loop waits for it with
``select``, which PEP 475 retries after each handler with the remaining timeout.
"""

from __future__ import annotations

import os
import select


class Waker:
    """Interrupts :meth:`wait` from any thread or signal handler (a self-pipe).

    The pipe's two descriptors are close-on-exec, so jobs started afterwards do not inherit
    them; call :meth:`close` when done.
    """

    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def set(self) -> None:
        """Wake the waiter now, or make its next :meth:`wait` return at once. Never blocks
        and never raises: a full pipe already holds a pending wake-up."""
        try:
            os.write(self._w, b"\0")
        except OSError:
            pass

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for :meth:`set`; True when woken. Pending wake-ups
        are consumed."""
        try:
            ready, _, _ = select.select([self._r], [], [], max(0.0, timeout_s))
        except (OSError, ValueError):  # closed meanwhile
            return True
        if not ready:
            return False
        try:
            while os.read(self._r, 4096):
                pass
        except OSError:  # BlockingIOError once drained
            pass
        return True

    def clear(self) -> None:
        """Kept for the Event-like interface: :meth:`wait` already consumes wake-ups."""

    def close(self) -> None:
        """Close both descriptors."""
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
