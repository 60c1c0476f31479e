"""The runs of ``dlwatch verify``: each one's argv (dlwatch's own interpreter, isolated, running
``dlwatch run``: :func:`run_argv`), starting one and waiting for it (:func:`run_one`: its own
folder and temp folder, the fix's ``RLIMIT_NOFILE`` (setrlimit(2)), its own session, ended after
``--max-run-s``), the bound that ``dlwatch run --stop-after-batches/--stop-after-s`` applies
inside each run (:class:`RunBound`), what the ended runs left in ``/dev/shm``
(:func:`shm_left`), the runs' settings file (:func:`write_settings`), and SIGTERM or SIGHUP
ending verify while a run is in progress (:class:`Stopped`).
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from .. import children, redact
from ..errors import WatchdogError
from ..report import browse
from ..text import one_line
from ..types import Fix, ReportWritten, Sample
from . import throughput_ab
from .verify_plan import FIXED, OUTPUT_FILE, Origin
from .verify_verdict import RunResult, certainty_of, fix_applied, outcome_of

# What each run's ``dlwatch run`` writes at its end (``--summary-json``).
SUMMARY_FILE = "run-summary.json"


class RunBound:
    """When a verify run has gone far enough: ``batches`` delivered by main's DataLoader
    iterators (counted over every iterator, each epoch's included: the inside view counts
    per iterator), ``seconds`` since it started, or a hang report written. Used by
    ``dlwatch run --stop-after-batches/--stop-after-s`` (the runs ``verify`` starts).

    ``started`` is a ``time.monotonic()`` reading."""

    def __init__(self, batches: Optional[int], seconds: Optional[float], started: float) -> None:
        self.batches, self.seconds, self.started = batches, seconds, started
        self._per_iterator: Dict[Tuple[int, int], int] = {}
        self.first_batch_s: Optional[float] = None
        self.batch_size: Optional[int] = None
        self.settings: Dict[str, object] = {}
        self.hung = ""
        # (seconds since ``started``, batches delivered) at each sample whose count grew: the
        # throughput path's rate past its warm-up (watchdog.commands.throughput_ab)
        self.progress: List[Tuple[float, int]] = []

    @property
    def delivered(self) -> int:
        """Batches delivered by main's iterators so far (as last sampled)."""
        return sum(self._per_iterator.values())

    def note(self, sample: Optional[Sample]) -> None:
        """Count the batches in ``sample`` (the job watcher's latest)."""
        main = sample.main if sample is not None else None
        if sample is None or main is None:
            return
        for v in sample.loaders:
            if v.pid != main.pid:
                continue
            key = (v.pid, v.iterator)
            self._per_iterator[key] = max(self._per_iterator.get(key, 0), v.batches)
            if self.first_batch_s is None and v.first_batch_s is not None:
                self.first_batch_s = v.first_batch_s
            settings = dict(v.settings)
            if not self.settings:
                self.settings = settings
                size = settings.get("batch_size")
                self.batch_size = size if isinstance(size, int) else None
        delivered = self.delivered
        if delivered and (not self.progress or delivered > self.progress[-1][1]):
            self.progress.append((round(sample.t_mono - self.started, 3), delivered))
            self.progress = throughput_ab.thin(self.progress)

    def reported(self, written: ReportWritten) -> None:
        """A report was written (``NodeLoop.on_report``): a hang ends the run."""
        if written.mode == "hang" and not self.hung:
            self.hung = written.kind

    def reached(self, now: float) -> Optional[str]:
        """Why the run should end now (``hung``, ``batches``, ``seconds``), or ``None``."""
        if self.hung:
            return "hung"
        if self.batches is not None and self.delivered >= self.batches:
            return "batches"
        if self.seconds is not None and now - self.started >= self.seconds:
            return "seconds"
        return None

    def summary(self, exit_code: int, stopped: Optional[str], reports: Sequence[str], now: float) -> dict:
        """What ``--summary-json`` holds: the job's ``exit_code``, why dlwatch ended it
        (``stopped``; ``None``: it ended by itself or was ended for a proven hang), the
        batches delivered, samples per second after the first batch, the first batch's
        latency and the run's length (seconds), the loader's settings as the job's recorder
        saw them, the report folders written, and ``progress``: ``[seconds since the start,
        batches delivered]`` at each sample whose count grew."""
        elapsed = now - self.started
        rate = None
        if self.batch_size and self.delivered > 1 and self.first_batch_s is not None and elapsed > self.first_batch_s:
            rate = round((self.delivered - 1) * self.batch_size / (elapsed - self.first_batch_s), 1)
        return {
            "exit_code": exit_code,
            "stopped": stopped,
            "hung": self.hung or None,
            "batches": self.delivered,
            "samples_per_s": rate,
            "first_batch_s": None if self.first_batch_s is None else round(self.first_batch_s, 3),
            "elapsed_s": round(elapsed, 1),
            "loader_settings": self.settings,
            "reports": list(reports),
            "progress": [list(p) for p in self.progress],
        }


def run_argv(settings_path: str, run_dir: str, args: Sequence[str], command: Sequence[str]) -> List[str]:
    """The argv of one run: dlwatch's own interpreter, isolated (``-I``: what it imports comes
    from its installation, never from the job's working directory or ``PYTHONPATH``), running
    ``dlwatch run`` with the runs' settings, ``args`` and ``--summary-json`` into ``run_dir``,
    then ``command``."""
    summary_path = os.path.join(run_dir, SUMMARY_FILE)
    head = [sys.executable, "-I", "-m", "watchdog", "run", "--config", settings_path, "--report-dir", run_dir]
    return head + list(args) + ["--summary-json", summary_path, "--", *command]


def run_one(
    origin: Origin,
    cwd: str,
    variant: str,
    index: int,
    args: List[str],
    env_changes: Dict[str, str],
    fix: Fix,
    folder: str,
    settings_path: str,
    command: Sequence[str],
    max_run_s: float,
    measure_load: bool = False,
) -> RunResult:
    """Start one run (:func:`run_argv`, in its own folder under ``folder``, in the working
    directory ``cwd`` that :func:`~watchdog.commands.verify_trust.trusted_place` checked) and
    wait for it, ending its process group after ``max_run_s`` seconds whatever happens. Its
    output (the job's stdout and stderr, and dlwatch's lines) goes to ``OUTPUT_FILE`` there.
    ``measure_load``: note other processes' CPU use meanwhile (:class:`~watchdog.commands.throughput_ab.LoadMeter`)."""
    run_dir = os.path.join(folder, f"{variant}-{index}")
    os.makedirs(run_dir, mode=0o700, exist_ok=False)
    summary_path = os.path.join(run_dir, SUMMARY_FILE)
    argv = run_argv(settings_path, run_dir, args, command)
    env = dict(os.environ)
    env.update(env_changes)
    # The run's own temp folder (pymp-*, caches), removed after it: a private one in the temp
    # folder the job would use (short: multiprocessing binds AF_UNIX sockets there, whose paths
    # are limited to 108 bytes, unix(7)), never under the report folder.
    import tempfile

    tmp = tempfile.mkdtemp(prefix=f"dlwatch-verify-{variant}-{index}-")
    env["TMPDIR"] = tmp
    nofile = fix.nofile if variant == FIXED else None

    def limits() -> None:
        if nofile is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            soft = nofile if hard == resource.RLIM_INFINITY else min(nofile, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    fd = os.open(os.path.join(run_dir, OUTPUT_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            preexec_fn=limits,
        )
    finally:
        os.close(fd)
    configured = origin.settings.get("terminate_grace_s")
    grace = float(configured) if isinstance(configured, (int, float)) and not isinstance(configured, bool) else 10.0
    timed_out = False
    meter = throughput_ab.LoadMeter() if measure_load else None
    try:
        if meter is None:
            proc.wait(max_run_s)
        else:
            throughput_ab.wait_measuring(proc, max_run_s, meter)
    except subprocess.TimeoutExpired:
        timed_out = True
        children.end_tree(proc, min(grace, 600.0))
    except BaseException:
        children.end_tree(proc, min(grace, 600.0))
        raise
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)  # never follows a link the job left (rmtree.avoids_symlink_attacks)
    summary = _read_json(summary_path)
    docs = [d for d in (_read_report(f) for f in browse.folders(run_dir)) if d is not None]
    outcome, kind = ("timed out", "") if timed_out and summary is None else outcome_of(summary, docs)
    s = summary or {}
    others, host = meter.stop() if meter is not None else (None, None)
    error = _last_line(os.path.join(run_dir, OUTPUT_FILE)) if outcome in ("crashed", "failed") and not docs else ""
    return RunResult(
        variant=variant,
        index=index,
        outcome=outcome,
        kind=kind,
        exit_code=s.get("exit_code"),
        batches=s.get("batches"),
        samples_per_s=s.get("samples_per_s"),
        first_batch_s=s.get("first_batch_s"),
        elapsed_s=s.get("elapsed_s"),
        applied=fix_applied(fix, variant, summary),
        reports=tuple(browse.folders(run_dir)),
        error=error,
        progress=throughput_ab.parse_progress(s.get("progress")),
        others_cpus=None if others is None else round(others, 3),
        host_cpus=host,
        certainty=certainty_of(docs) if outcome == "hung" else "",
    )


def _last_line(path: str, limit: int = 4096) -> str:
    """The last non-empty line of the file at ``path`` (read from its last ``limit`` bytes,
    without following a link), redacted and on one line; ``""`` when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - limit), os.SEEK_SET)
        data = os.read(fd, limit)
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = [x.strip() for x in data.decode("utf-8", "replace").splitlines() if x.strip()]
    return one_line(redact.value(lines[-1]))[:300] if lines else ""


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _read_report(folder: str) -> Optional[dict]:
    try:
        return browse.load(folder)
    except WatchdogError:
        return None


def shm_left(results: Sequence[RunResult]) -> Optional[str]:
    """What the runs left in ``/dev/shm`` (their ``shm_leaked`` reports), one line, or
    ``None``: dlwatch ends each run's processes, and a killed job's shared memory files may
    stay; each report names its files and the command that removes them."""
    found = []
    for r in results:
        for folder in r.reports:
            doc = _read_report(folder)
            if doc is not None and any(d.get("kind") == "shm_leaked" for d in doc.get("diagnoses", [])):
                found.append((r, folder))
    if not found:
        return None
    runs = ", ".join(f"{r.variant} {r.index}" for r, _ in found)
    return (
        f"left in /dev/shm by the ended runs ({runs}): their shm_leaked reports name the files and how to remove "
        f"them ({found[0][1]})"
    )


class Stopped(BaseException):
    """SIGTERM or SIGHUP reached ``verify`` while a run was in progress: the run is ended
    (:func:`watchdog.children.end_tree`) and verify exits 128 + N."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_stopped(signum, _frame) -> None:
    raise Stopped(signum)


def write_settings(path: str, settings: Dict[str, object]) -> None:
    """The runs' settings file (YAML, ``0600``)."""
    import yaml

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(settings, f, sort_keys=True)
