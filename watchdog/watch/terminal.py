"""Job control for ``dlwatch run``: the job owns the terminal as a shell's foreground job would.

``dlwatch run`` starts the job in a process group of its own (so that ending it never reaches
the shell). Without more, that group is a *background* group of the terminal: the first read
from the terminal (``input()``, ``breakpoint()``, a tool's ``[y]es, [n]o`` prompt) stops the
whole job with SIGTTIN (the kernel's job control, Documentation/driver-api/tty/tty_ldisc.rst;
termios(3), tcsetpgrp(3)). So, as a shell does (bash's ``give_terminal_to``), when dlwatch's
own group is the terminal's foreground group it hands the terminal to the job's group once the
job has started, and takes it back when the job ends. Ctrl-C and Ctrl-\\ then reach the job
straight from the terminal, as without dlwatch.

A job stopped by a terminal signal (Ctrl-Z's SIGTSTP, or SIGTTIN/SIGTTOU while it is in the
background) is passed on: dlwatch takes the terminal back and sends the same signal to its own
group, so the shell sees the job it started (dlwatch) stopped and ``fg``/``bg`` work; when
dlwatch is continued it gives the terminal back to the job if it is in the foreground again,
and continues the job. SIGSTOP from elsewhere (a user's ``kill -STOP``) is left alone: the job
is paused and the watchdog's stall clock waits.
"""

from __future__ import annotations

import os
import signal
import termios
import threading
import time
from typing import Callable, Optional

from ..collect import procfs

# The stop signals that come from the terminal (the others, SIGSTOP, come from a person).
TERMINAL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


class JobControl:
    """The controlling terminal (``/dev/tty``), shared with the job as a shell shares it.

    Args:
        log: where one-line notes go.
        tty: the terminal's path (``/dev/tty``: the controlling terminal, whichever of the
            standard descriptors names it).

    ``foreground`` is True when dlwatch's own process group owned the terminal at start (an
    interactive shell's foreground job): only then is the terminal handed to the job at once.
    """

    def __init__(self, log: Callable[[str], None] = lambda _m: None, tty: str = "/dev/tty") -> None:
        self.fd: Optional[int] = None
        self.own = os.getpgrp()
        self.foreground = False
        self.log = log
        self.job: Optional[int] = None
        self.handed = False  # the terminal was given to the job at least once
        self._modes: Optional[list] = None  # the terminal's settings before the job had it
        try:
            self.fd = os.open(tty, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
            self.foreground = os.tcgetpgrp(self.fd) == self.own
        except OSError:
            self._close()

    def _close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = None

    def _set_foreground(self, pgid: int) -> bool:
        """``tcsetpgrp`` with SIGTTOU blocked in this thread (a background process's call would
        otherwise stop it; tcsetpgrp(3)). Returns whether it took."""
        if self.fd is None:
            return False
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
        try:
            os.tcsetpgrp(self.fd, pgid)
            return True
        except OSError:
            return False
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _owned_by(self, pgid: int) -> bool:
        try:
            return self.fd is not None and os.tcgetpgrp(self.fd) == pgid
        except OSError:
            return False

    def _give(self, pgid: int) -> None:
        """Hand the terminal to ``pgid``, its settings saved first (restored at the end)."""
        if self._modes is None and self.fd is not None:
            try:
                self._modes = termios.tcgetattr(self.fd)
            except termios.error:
                self._modes = None
        if self._set_foreground(pgid):
            self.handed = True

    def hand_over(self, pgid: int) -> None:
        """Give the terminal to the job's group ``pgid`` (just started), when dlwatch had it.
        A job that read the terminal before this (and stopped with SIGTTIN) is continued. From
        here on dlwatch ignores SIGTTOU itself (a background writer with ``stty tostop``), as
        shells do; the job, already running, keeps its own dispositions."""
        self.job = pgid
        if not self.foreground:
            return
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        self._give(pgid)
        if self.handed and _stopped(pgid):
            _continue(pgid)

    def job_stopped(self, signum: int) -> bool:
        """The job (its leader) stopped with ``signum``. A terminal stop is passed on to
        dlwatch's own group (see the module docstring) and, once dlwatch runs again, the job
        gets the terminal back and is continued. Returns True when the job is left stopped
        waiting for the terminal (dlwatch is in the background and cannot give it): call
        :meth:`resume_if_foreground` until it takes. Without a terminal, or for SIGSTOP, the
        stop is left alone (False). Call from the thread that waits for the job; it blocks
        while dlwatch is stopped."""
        pgid = self.job
        if pgid is None or self.fd is None or signum not in TERMINAL_STOPS:
            return False
        if self._owned_by(pgid):
            self._set_foreground(self.own)
        mine = signal.SIGTSTP if signum == signal.SIGTTOU else signum  # dlwatch ignores SIGTTOU
        try:
            os.killpg(self.own, mine)  # whatever shares dlwatch's group (a wrapper script) stops
            # A group's signal may be taken by another thread: this one stops here, at once.
            signal.pthread_kill(threading.get_ident(), mine)
        except OSError:
            pass
        # Continued (fg, bg), or the signal was discarded (an orphaned group, no shell to resume it).
        if self.resume_if_foreground():
            return False
        if signum != signal.SIGTSTP:
            # It waits for terminal input that it cannot get in the background: continuing it
            # would only stop it again.
            self.log(
                f"the job stopped with {signal.Signals(signum).name}: it waits for terminal input, and the terminal "
                "belongs to another process group; bring dlwatch to the foreground (fg) to answer"
            )
            return True
        _continue(pgid)
        return False

    def resume_if_foreground(self) -> bool:
        """When dlwatch's group owns the terminal now: give it to the job, continue the job, and
        return True."""
        if self.job is None or not self._owned_by(self.own):
            return False
        self._give(self.job)
        _continue(self.job)
        return True

    def restore(self) -> None:
        """After the job ended: take the terminal back for dlwatch's group and restore the
        settings it had before the job had it (a job killed in pdb, getpass or curses leaves it
        without echo), as shells do."""
        if self.handed and self.job is not None and self._owned_by(self.job):
            self._set_foreground(self.own)
        if self.handed and self._modes is not None and self.fd is not None:
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self._modes)
            except termios.error:
                pass
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
        self._close()


def _stopped(pid: int) -> bool:
    st = procfs.proc_stat(pid)
    return st is not None and st.state in ("T", "t")


def _continue(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGCONT)
    except OSError:
        pass


# Seconds between looks at the terminal while the job waits, stopped, for dlwatch to own it.
_PARKED_POLL_S = 0.5


def wait_job(pid: int, control: JobControl) -> int:
    """Wait for the job's leader ``pid`` to exit, passing its terminal stops to ``control``
    (and, while it waits stopped for the terminal, handing it over once dlwatch has it);
    returns its exit status as ``subprocess`` gives it (negative: killed by that signal).
    Reaps ``pid``: the caller sets ``Popen.returncode`` from it.

    Raises:
        ChildProcessError: ``pid`` is not a child of this process (or was already reaped).
    """
    parked = False
    while True:
        flags = os.WUNTRACED | (os.WNOHANG | os.WCONTINUED if parked else 0)
        try:
            got, status = os.waitpid(pid, flags)
        except InterruptedError:
            continue
        if got == 0:  # parked: nothing happened to the job
            if control.resume_if_foreground():
                parked = False
            else:
                time.sleep(_PARKED_POLL_S)
            continue
        if os.WIFCONTINUED(status):
            parked = False
        elif os.WIFSTOPPED(status):
            parked = control.job_stopped(os.WSTOPSIG(status))
        else:
            return os.waitstatus_to_exitcode(status)
