"""What a watcher is told of its job, once (:class:`WatchedJob`), what watching it produced
(:class:`Outcome`), and dlwatch's own lines on stderr (:func:`say`, :func:`log`)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from ..collect.inside import InsideReader
from ..types import Launch


def _no_tail() -> str:
    return ""


@dataclass(frozen=True)
class WatchedJob:
    """The job's parameters, given once by the command that watches it (``dlwatch run`` or
    ``attach``) and shared by the job's watcher and its ranks' (:class:`~watchdog.watch.node_loop.NodeLoop`).

    Attributes:
        root_pid: the job's root process.
        own_group: the job's process group when dlwatch created it for the job alone
            (``dlwatch run``), signalled on terminate besides the job's tree; ``None`` for
            ``attach``, whose job may share its group with the shell that started it, and for a
            rank.
        own_session: dlwatch's own session when dlwatch leads it and started nothing else in it
            but the job (``dlwatch run`` as a session leader: under ``dlwatch verify``, a
            service manager, ``setsid``): its every other process is the job's, ended with it
            (:func:`~watchdog.watch.act.terminate_tree`); ``None`` otherwise and for a rank.
        job_ended: returns True once the job is gone.
        stderr_tail: returns the last bytes of the job's stderr (``dlwatch run`` only).
        cmdline: the command that started the job, for reports written before main was seen.
        inside: reader of the job's own DataLoader records (``None``: no inside view).
        launch: how the job was started, written into each report for ``dlwatch verify``.
    """

    root_pid: int
    own_group: Optional[int]
    job_ended: Callable[[], bool]
    stderr_tail: Callable[[], str] = _no_tail
    cmdline: Tuple[str, ...] = ()
    inside: Optional[InsideReader] = None
    launch: Optional[Launch] = None
    own_session: Optional[int] = None

    def rank(self, pid: int, ended: Callable[[], bool]) -> "WatchedJob":
        """The same job as one of its ranks sees it: watched from ``pid`` (the rank's main),
        ended when ``ended()`` says so, no process group of its own, no command of its own."""
        return dataclasses.replace(self, root_pid=pid, own_group=None, own_session=None, job_ended=ended, cmdline=())


@dataclass
class Outcome:
    """What watching a job produced: report folders written, whether the job was ended for a
    hang (``terminated``), and why watching stopped before the job ended (``stopped``: the
    reason a bounded run of ``dlwatch verify`` gave; ``None``: it did not);
    ``resolved`` the hang reports among ``reports`` that resolved by themselves."""

    reports: List[str] = field(default_factory=list)
    terminated: bool = False
    stopped: Optional[str] = None
    resolved: List[str] = field(default_factory=list)

    @property
    def failures(self) -> List[str]:
        """The reports that say something went wrong: every report but the hang reports that
        resolved by themselves (``outcome.json``: ``resolved``; a slow wait, not a hang).
        ``attach`` exits ``Exit.HANG_REPORTED`` when there is one, else ``Exit.OK``."""
        done = set(self.resolved)
        return [r for r in self.reports if r not in done]


def say(text: str) -> None:
    """Write ``text`` to stderr; a stderr that cannot be written (a full disk, a closed pipe)
    is ignored: reports and the job matter more than our messages."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def log(message: str) -> None:
    """One line on stderr, prefixed ``dlwatch:`` (see :func:`say`)."""
    say(f"dlwatch: {message}\n")
