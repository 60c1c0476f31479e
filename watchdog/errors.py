"""Exceptions of dataloader-watchdog, each carrying the input it is about.

Modelled on psutil ``_common.py`` (``NoSuchProcess``, ``AccessDenied``): exceptions are data;
only :mod:`watchdog.cli` turns them into a one-line message and an exit code.
"""

from __future__ import annotations

from typing import Sequence, Tuple

PTRACE_REMEDY = (
    "py-spy needs ptrace: run dlwatch as the job's user with ptrace allowed — "
    "`sysctl kernel.yama.ptrace_scope=0` (or run as root), Docker `--cap-add SYS_PTRACE`, "
    "Kubernetes `securityContext.capabilities.add: [SYS_PTRACE]` and, for a sidecar container, "
    "`shareProcessNamespace: true`"
)


class WatchdogError(Exception):
    """Base class: an error with a one-line message meant for the user."""


class ConfigError(WatchdogError):
    """A configuration file or option is invalid; ``key`` names the offending setting."""

    def __init__(self, key: str, message: str, source: str = "config") -> None:
        self.key = key
        self.source = source
        super().__init__(f"{source}: {key}: {message}")


class TargetError(WatchdogError):
    """The process to watch cannot be watched; ``pid`` names it."""

    def __init__(self, pid: int, message: str) -> None:
        self.pid = pid
        super().__init__(f"--pid {pid}: {message}")


class NoSuchTarget(TargetError):
    """No process has this PID."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid, "no such process")


class NotPython(TargetError):
    """The process exists but is not a Python interpreter (a launcher shell, a ``srun``):
    ``children`` are the Python processes it started, ``(pid, command line)`` each, the command
    line already one printable, redacted line; the message names them so that the user can
    attach to one (``--pid 812: not a Python process (/usr/bin/dash); its Python children: 815
    (python train.py): attach to one of them``)."""

    def __init__(self, pid: int, exe: str, children: Sequence[Tuple[int, str]] = ()) -> None:
        self.children = tuple(children)
        if self.children:
            named = ", ".join(f"{p} ({cmd})" for p, cmd in self.children)
            super().__init__(pid, f"not a Python process ({exe}); its Python children: {named}: attach to one of them")
        else:
            super().__init__(pid, f"not a Python process ({exe}), and it has started no Python process")


class TargetAccessDenied(TargetError):
    """The process exists but this user may not read it."""

    def __init__(self, pid: int) -> None:
        super().__init__(
            pid,
            "permission denied reading /proc for this process (ptrace access); run dlwatch as the job's user or root — "
            + PTRACE_REMEDY,
        )


class ProcError(WatchdogError):
    """A ``/proc`` read about process ``pid`` failed (``path``, relative to ``/proc/PID``);
    raised only by the reads that say so, translated from ``OSError`` in one place
    (:func:`watchdog.collect.procfs.proc_errors`, as psutil's ``wrap_exceptions``). This class
    itself means dlwatch's own trouble (``errno``: EMFILE, EIO), not the process's."""

    def __init__(self, pid: int, path: str, errno: int = 0, why: str = "") -> None:
        self.pid = pid
        self.path = path
        self.errno = errno
        super().__init__(f"/proc/{pid}/{path}: {why or 'cannot be read'}")


class ProcessGone(ProcError):
    """The process ended (or its pid never existed): ``ENOENT``, ``ESRCH``."""


class ProcAccessDenied(ProcError):
    """dlwatch may not read it (another user's process without ptrace access): ``EACCES``, ``EPERM``."""


class ReportWriteError(WatchdogError):
    """A report could not be written to ``path`` (full disk, permission)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"cannot write report to {path}: {reason}")


class ReportNotFound(WatchdogError):
    """A path that is not a readable report folder (no ``report.json`` in it)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path!r}: {why}")
        self.path = path
