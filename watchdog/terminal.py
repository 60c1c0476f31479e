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
from typing import Callable, Optional

from .collect import procfs

# The stop signals that come from the terminal (the others, SIGSTOP, come from a person).
TERMINAL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


class JobControl:
    """The terminal on ``fd`` (standard input), shared with the job as a shell shares it.

    Args:
        fd: the descriptor whose terminal the job may read (0: standard input).
        log: where one-line notes go.

    ``foreground`` is True when dlwatch's own process group owned the terminal at start (an
    interactive shell's foreground job): only then is the terminal handed to the job.
    """

    def __init__(self, fd: int = 0, log: Callable[[str], None] = lambda _m: None) -> None:
        self.fd: Optional[int] = None
        self.own = os.getpgrp()
        self.foreground = False
        self.log = log
        self.job: Optional[int] = None
        try:
            if os.isatty(fd):
                self.fd = fd
                self.foreground = os.tcgetpgrp(fd) == self.own
        except OSError:
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

    def hand_over(self, pgid: int) -> None:
        """Give the terminal to the job's group ``pgid`` (just started), when dlwatch had it.
        A job that read the terminal before this (and stopped with SIGTTIN) is continued. From
        here on dlwatch ignores SIGTTOU itself (a background writer with ``stty tostop``), as
        shells do; the job, already running, keeps its own dispositions."""
        self.job = pgid
        if not self.foreground:
            return
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        if self._set_foreground(pgid) and _stopped(pgid):
            _continue(pgid)

    def job_stopped(self, signum: int) -> None:
        """The job (its leader) stopped with ``signum``: pass a terminal stop on to dlwatch's
        own group (see the module docstring) and, once dlwatch runs again, continue the job.
        Call from the thread that waits for the job; it blocks while dlwatch is stopped."""
        pgid = self.job
        if pgid is None or signum not in TERMINAL_STOPS:
            return
        if self._owned_by(pgid):
            self._set_foreground(self.own)
        try:
            os.killpg(self.own, signum)  # dlwatch (and whatever shares its group) stops here
        except OSError:
            pass
        # Continued (fg, bg), or the signal was discarded (an orphaned group, no shell to resume it).
        if self._owned_by(self.own):
            self._set_foreground(pgid)
        elif signum != signal.SIGTSTP:
            # It waits for terminal input that it cannot get in the background: continuing it
            # would only stop it again.
            self.log(
                f"the job stopped with {signal.Signals(signum).name}: it waits for terminal input, and the terminal "
                "belongs to another process group; bring dlwatch to the foreground (fg) to answer"
            )
            return
        _continue(pgid)

    def restore(self) -> None:
        """Take the terminal back for dlwatch's group after the job ended (when it was handed)."""
        if self.foreground and self.job is not None and self._owned_by(self.job):
            self._set_foreground(self.own)


def _stopped(pid: int) -> bool:
    st = procfs.proc_stat(pid)
    return st is not None and st.state in ("T", "t")


def _continue(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGCONT)
    except OSError:
        pass


def wait_job(pid: int, control: JobControl) -> int:
    """Wait for the job's leader ``pid`` to exit, passing its terminal stops to ``control``;
    returns its exit status as ``subprocess`` gives it (negative: killed by that signal).
    Reaps ``pid``: the caller sets ``Popen.returncode`` from it.

    Raises:
        ChildProcessError: ``pid`` is not a child of this process (or was already reaped).
    """
    while True:
        try:
            _, status = os.waitpid(pid, os.WUNTRACED)
        except InterruptedError:
            continue
        if os.WIFSTOPPED(status):
            control.job_stopped(os.WSTOPSIG(status))
            continue
        return os.waitstatus_to_exitcode(status)
