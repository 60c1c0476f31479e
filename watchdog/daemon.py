"""The watch loop: sample, detect, and on a stall confirm, dump, diagnose, report and act.

The only module (with the CLI) that wires stages together. It must never harm the job: every
stage's failure is caught here, logged once, and watching goes on; no signal is sent unless
``on_hang: terminate`` is configured.

NOTE [ Escalation ladder ]
1. Every ``interval_s``: cheap psutil and ``/proc`` reads (no ptrace).
2. After ``stall_timeout_s`` without progress (NOTE [ Hang criterion ] in detect.py): one
   Python-only py-spy dump of main classifies the stall.
3. Then py-spy dumps main and every worker in parallel (native frames when configured) and
   ``/proc`` gives every thread's state, wait channel and system call.
4. The report is written; with ``on_hang: terminate`` the job's process group gets SIGTERM,
   then SIGKILL after ``terminate_grace_s`` (a ``stall_outside_loader`` only when
   ``terminate_outside_loader`` is true). With ``report`` the same unchanged hang is not
   reported twice; a new report needs progress first.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from . import __version__, act, detect, report, writer
from .collect import cgroup, procfs, pyspy
from .collect.sampler import Sampler
from .collect.sampler import host_sample as sampler_host_sample
from .config import Config
from .diagnose import diagnose
from .errors import ReportWriteError
from .types import MODE_CRASH, MODE_HANG, MODE_LIVE, SEVERITY_CRASH, SEVERITY_WARNING, Facts, Sample, Stall
from .wake import Waker

# Seconds between two warnings of the same kind (a new process set each epoch would repeat them).
_WARNING_COOLDOWN_S = 600.0
# Python frames per thread whose source lines go into the report.
_SOURCE_FRAMES_PER_THREAD = 12


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


@dataclass
class Outcome:
    """What watching a job produced: report folders written and whether the job was ended."""

    reports: List[str] = field(default_factory=list)
    terminated: bool = False


class Watcher:
    """Watches one job until it ends (or ``stop`` is set).

    Args:
        config: validated settings.
        root_pid: the job's root process.
        pgid: the job's process group (signalled on terminate).
        job_ended: returns True once the job is gone.
        wake: interrupts the sleep between samples (job exit, signals); a :class:`~watchdog.wake.Waker`,
            never a ``threading.Event``, whose ``set()`` a signal handler must not call.
        on_tick: called every loop turn (``dlwatch run`` forwards signals there).
        stderr_tail: returns the last bytes of the job's stderr (``dlwatch run`` only).
        job_cmdline: the command that started the job, for reports written before main was seen.
    """

    def __init__(
        self,
        config: Config,
        root_pid: int,
        pgid: int,
        job_ended: Callable[[], bool],
        wake: Waker,
        on_tick: Callable[[], None] = lambda: None,
        stderr_tail: Callable[[], str] = lambda: "",
        job_cmdline: Optional[List[str]] = None,
    ) -> None:
        self.config = config
        self.root_pid = root_pid
        self.pgid = pgid
        self.job_ended = job_ended
        self.wake = wake
        self.on_tick = on_tick
        self.stderr_tail = stderr_tail
        self.job_cmdline = list(job_cmdline or [])
        self.stop = threading.Event()
        self.outcome = Outcome()
        self.sampler = Sampler(root_pid, config.full_info_interval_s)
        self.tracker = detect.ProgressTracker(config.cpu_progress_s)
        self.births = detect.WorkerBirths()
        self.timeline: collections.deque = collections.deque(maxlen=config.timeline_samples)
        self.pyspy = pyspy.find_pyspy(config.py_spy.path)
        self._reported_delivery: Optional[float] = None
        self._errors_logged = set()
        self._warned: Dict[str, Tuple[float, frozenset]] = {}
        self._last_live_look = time.monotonic()
        self._oom_at_start = cgroup.oom_kills(root_pid)
        self.host_cpus = os.cpu_count() or 1

    def _internal_error(self, where: str) -> None:
        if where not in self._errors_logged:
            self._errors_logged.add(where)
            log(f"internal error while {where} (watching goes on): {traceback.format_exc(limit=3).strip().splitlines()[-1]}")

    def run(self) -> Outcome:
        """Watch until the job ends, it is terminated, or ``stop`` is set."""
        if self.pyspy is None:
            log("py-spy not found (pip install py-spy, or set py_spy.path): reports will hold /proc facts only")
        while not self.stop.is_set() and not self.job_ended():
            self.on_tick()
            try:
                self._tick()
            except Exception:  # never let the watchdog's failure reach the job
                self._internal_error("sampling")
            if self.outcome.terminated:
                break
            self.wake.wait(self.config.interval_s)
            self.wake.clear()
        self.on_tick()
        return self.outcome

    def _tick(self) -> None:
        sample = self.sampler.sample()
        if sample.main is None:
            return
        self.timeline.append(sample)
        self.births.update(sample)
        self.tracker.update(sample)
        stall = self.tracker.stall(sample)
        if stall is None:
            return
        delivery = self.tracker.last_delivery_mono
        if self._reported_delivery is not None and delivery != self._reported_delivery:
            self._reported_delivery = None  # a batch moved since the last report: a new hang may be reported
        due = stall.stall_s >= self.config.stall_timeout_s or stall.no_delivery_s >= self.config.busy_stall_timeout_s
        if due and self._reported_delivery is None and not self.job_ended():
            self._reported_delivery = delivery
            try:
                self._handle_stall(sample, stall)
            except Exception:
                self._internal_error("handling a stall")
        elif sample.t_mono - self._last_live_look >= self.config.warning_interval_s:
            self._last_live_look = sample.t_mono
            try:
                self._look_for_warnings(sample)
            except Exception:
                self._internal_error("looking for warnings")

    def _oom_kills(self) -> Optional[int]:
        now = cgroup.oom_kills(self.root_pid)
        if now is None or self._oom_at_start is None:
            return None
        return now - self._oom_at_start

    def _look_for_warnings(self, sample: Sample) -> None:
        facts = Facts(mode=MODE_LIVE, sample=sample, timeline=tuple(self.timeline), host_cpus=self.host_cpus)
        for d in diagnose(facts):
            if d.severity != SEVERITY_WARNING:
                continue
            last = self._warned.get(d.kind)
            pids = frozenset(d.pids)
            if last is not None and (last[1] == pids or sample.t_mono - last[0] < _WARNING_COOLDOWN_S):
                continue  # at most once per kind and process set, and not more often than the cooldown
            self._warned[d.kind] = (sample.t_mono, pids)
            self._publish(facts, (d,), "report", f"warning-{d.kind}", summary_only=True)

    def after_exit(self, exit_code: Optional[int]) -> None:
        """Diagnose a job that ended with a non-zero ``exit_code`` from its stderr tail and the
        timeline; write a crash report when a crash rule fires (nothing otherwise)."""
        if not exit_code:
            return
        try:
            last = self.timeline[-1] if self.timeline else Sample(time.monotonic(), time.time(), (), sampler_host_sample(None))
            facts = Facts(
                mode=MODE_CRASH,
                sample=last,
                timeline=tuple(self.timeline),
                stderr_tail=self.stderr_tail(),
                exit_code=exit_code,
                oom_kills=self._oom_kills(),
                host_cpus=self.host_cpus,
            )
            found = tuple(d for d in diagnose(facts) if d.severity == SEVERITY_CRASH)
            if found:
                self._publish(facts, found, "none (the job had already exited)", "crash")
        except Exception:
            self._internal_error("diagnosing the job's exit")

    def _publish(self, facts: Facts, diagnoses, action: str, suffix: str, summary_only: bool = False) -> None:
        """Build, print and write one report; never raises ReportWriteError."""
        main = facts.sample.main
        if main is not None:
            job = {
                "pid": main.pid,
                "cmdline": list(main.cmdline),
                "start_time": report.utc_iso(main.create_time),
                "root_pid": self.root_pid,
            }
        else:  # the job ended before its first sample
            job = {"pid": self.root_pid, "cmdline": self.job_cmdline, "start_time": None, "root_pid": self.root_pid}
        info = {"version": __version__, "py_spy": self.pyspy, "settings": self.config.model_dump()}
        env = procfs.environ(main.pid) if facts.mode != MODE_CRASH and main is not None else None
        rep = report.build(facts, diagnoses, job, time.time(), action, env, info, suffix)
        text = report.summary_text(rep.text)
        if summary_only:
            text = "\n".join(text.splitlines()[:4]) + "\n"
        say(text)
        try:
            path = writer.write_with_fallback(rep, [self.config.report_dir, os.path.join(tempfile.gettempdir(), "dlwatch-reports")], log)
            self.outcome.reports.append(path)
            stacks = f" (stacks of every process in {os.path.join(path, 'report.txt')})" if facts.mode == MODE_HANG else ""
            log(f"report written to {path}{stacks}")
        except ReportWriteError as e:
            log(f"{e}; the summary above is all that was kept")

    def _handle_stall(self, sample: Sample, stall: Stall) -> None:
        cfg = self.config.py_spy
        main = sample.main
        main_stack = pyspy.dump(main.pid, self.pyspy, native=False, timeout_s=cfg.timeout_s)
        verdict = detect.confirm(main.pid, main_stack, procfs.thread_details(main.pid), len(sample.workers))
        pids = [main.pid] + [w.pid for w in sample.workers]
        d_state = [p.pid for p in sample.processes if p.status == "D"]
        stacks = pyspy.dump_all(pids, self.pyspy, cfg.native, cfg.timeout_s, cfg.locals, d_state)
        if not stacks[main.pid].ok and main_stack.ok:
            stacks[main.pid] = main_stack
        details = {p.pid: procfs.thread_details(p.pid) for p in sample.processes}
        sources = {}
        for pid, st in stacks.items():
            wanted = [(f.file, f.line) for t in st.threads for f in [x for x in t.frames if not x.native][:_SOURCE_FRAMES_PER_THREAD]]
            sources.update(procfs.source_lines(pid, wanted))
        problems = [st.error for st in stacks.values() if st.error]
        facts = Facts(
            mode=MODE_HANG,
            sample=sample,
            timeline=tuple(self.timeline),
            stall=stall,
            verdict=verdict,
            stacks=tuple(sorted(stacks.items())),
            thread_details=tuple(sorted(details.items())),
            main_threads_at_fork=self.births.as_tuple(),
            source_lines=tuple(sources.items()),
            pyspy_problem=problems[0] if problems else None,
            stderr_tail=self.stderr_tail(),
            oom_kills=self._oom_kills(),
            host_cpus=self.host_cpus,
            open_files=tuple((pid, procfs.open_files(pid)) for pid in pids),
        )
        diagnoses = diagnose(facts)
        terminate = self.config.on_hang == "terminate" and (verdict.kind == "dataloader" or self.config.terminate_outside_loader)
        self._publish(facts, diagnoses, "terminate" if terminate else "report", "")
        after = self.sampler.sample()
        self.tracker.rebaseline(after)
        if terminate:
            log(f"on_hang=terminate: ending the job (process group {self.pgid}, grace {self.config.terminate_grace_s:g} s)")
            done = act.terminate_group(
                self.pgid,
                main.pid,
                main.create_time,
                self.config.terminate_grace_s,
                [p.pid for p in after.processes] or pids,
                self.job_ended,
            )
            log(done)
            self.outcome.terminated = True
