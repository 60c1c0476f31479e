"""Publish one report: build it (:func:`watchdog.report.document.build`), print its short summary, write
it (:func:`watchdog.report.writer.write_with_fallback`: atomic, owner-only) and run the configured
``on_*_exec`` command with its redacted ``DLWATCH_*`` variables. The wiring end of the pipeline:
:class:`watchdog.watch.watcher.Watcher` calls it for hangs, warnings, crashes and exits alike."""

from __future__ import annotations

import os
import socket
import time
from typing import Callable, Optional, Sequence

from .. import __version__, redact
from ..collect import procfs
from ..config import Config
from ..errors import ReportWriteError
from ..report import document as report
from ..report import rendering, writer
from ..types import MODE_CRASH, Diagnosis, Facts, RankId, ReportWritten
from .alert import Alerts
from .job import WatchedJob

# Settings whose values are shell commands, which may carry a token: never written as they are.
_COMMAND_SETTINGS = ("on_hang_exec", "on_crash_exec", "on_warning_exec")


def settings_shown(config: Config) -> dict:
    """``config`` as a report shows it: every setting, the alert commands (``alerts.on_*_exec``,
    which may carry a token) replaced by :data:`~watchdog.redact.REDACTED`."""
    settings = config.as_dict()
    alerts = settings.get("alerts") or {}
    for key in _COMMAND_SETTINGS:
        if alerts.get(key):
            alerts[key] = redact.REDACTED
    return settings


class Publisher:
    """Writes the reports of one watched process (a job, or one rank of it).

    Args:
        config: validated settings (``report_dir``, the ``on_*_exec`` commands).
        job: the job's parameters (:class:`~watchdog.watch.job.WatchedJob`): its root process,
            named in every report; the command that started it, for a report written before
            main was seen; how it was started (``job.launch`` in ``report.json``, its command
            redacted), for ``dlwatch verify`` (``None``: not known).
        rank: who a multi-rank job's rank is (its variables: ``RANK``, …), or ``None``.
        alerts: runs ``on_*_exec`` after each report.
        pyspy_path: the py-spy binary found (``None``: none), named in the report.
        say: writes the short summary (stderr); ``log``: one ``dlwatch:`` line.
        on_report: called with a :class:`~watchdog.types.ReportWritten` after each report written.
    """

    def __init__(
        self,
        config: Config,
        job: WatchedJob,
        rank: Optional[RankId],
        alerts: Alerts,
        pyspy_path: Optional[str],
        say: Callable[[str], None],
        log: Callable[[str], None],
        on_report: Callable[[ReportWritten], None],
    ) -> None:
        self.config = config
        self.root_pid = job.root_pid
        self.job_cmdline = list(job.cmdline)
        self.rank = rank
        self.alerts = alerts
        self.pyspy_path = pyspy_path
        self.say = say
        self.log = log
        self.on_report = on_report
        self.launch = job.launch

    def _job(self, facts: Facts) -> dict:
        main = facts.sample.main
        if main is None:  # the job ended before its first sample
            job: dict = {"pid": self.root_pid, "cmdline": self.job_cmdline, "start_time": None}
        else:
            job = {"pid": main.pid, "cmdline": list(main.cmdline), "start_time": report.utc_iso(main.create_time)}
        job["root_pid"] = self.root_pid
        job["node"] = self.config.node or socket.gethostname()
        if self.rank is not None:
            job["rank"] = self.rank.as_dict()
        if self.launch is not None:
            job["launch"] = self.launch.as_dict(tuple(redact.cmdline(self.launch.command)))
        return job

    def publish(
        self,
        facts: Facts,
        diagnoses: Sequence[Diagnosis],
        action: str,
        suffix: str,
        summary_only: bool = False,
        note: str = "",
    ) -> Optional[str]:
        """Build, print and write one report of ``facts`` and its ``diagnoses`` (first: the
        headline), with ``action`` (what dlwatch did) and ``note`` (why); its folder's name ends
        in ``suffix`` (prefixed ``rank<N>-`` in a rank). ``summary_only`` prints the short
        summary of a warning. Returns the report's folder, or ``None`` when it could not be
        written anywhere (said on stderr: the summary printed is all that was kept); never
        raises :class:`~watchdog.errors.ReportWriteError`."""
        rank = self.rank.number if self.rank is not None else ""
        if self.rank is not None:
            suffix = "-".join(x for x in (f"rank{rank}", suffix) if x)
        job = self._job(facts)
        settings = settings_shown(self.config)
        info = {"version": __version__, "py_spy": self.pyspy_path, "settings": settings}
        main = facts.sample.main
        env = procfs.environ(main.pid) if facts.mode != MODE_CRASH and main is not None else None
        rep = report.build(facts, diagnoses, job, time.time(), action, env, info, suffix, note)
        self.say(rendering.short_summary(rep.text, warning=summary_only))
        try:
            path = writer.write_with_fallback(rep, self.config.report_dir, self.log)
        except ReportWriteError as e:
            self.log(f"{e}; the summary above is all that was kept")
            return None
        self.log(f"full report: {os.path.join(path, 'report.txt')}")
        first = diagnoses[0]
        rank_vars = self.rank.vars if self.rank is not None else ()
        self.on_report(ReportWritten(str(facts.mode), first.kind, rank, str(first.severity), path, rank_vars))
        hook_env = {
            "DLWATCH_REPORT": path,
            "DLWATCH_KIND": first.kind,
            "DLWATCH_MODE": str(facts.mode),
            "DLWATCH_SUMMARY": first.summary,
            "DLWATCH_ACTION": action,
            "DLWATCH_JOB_PID": str(job["pid"]),
            "DLWATCH_RANK": rank,
        }
        # The summary quotes the job's exception text: redacted like every byte we write.
        self.alerts.fire(facts.mode, {k: redact.value(v) for k, v in hook_env.items()})
        return path
