"""``dlwatch verify REPORT``: prove a report's fix on the user's own job.

The job of the report is started again, under ``dlwatch run`` with the report's settings,
unchanged (the control) and with the fix applied (:class:`~watchdog.types.Fix`, declared by
the rule beside its remedy; the job's recorder applies its loader part, ``_dlwatch_fix``),
alternating, ``--runs`` times each. Each run is bounded (:class:`RunBound`): it ends once it
has delivered ``--batches`` batches (past the point where the original hung), after
``--seconds``, when a hang is reported, or when it ends by itself. The verdict says whether
the fix holds only when the runs reach significance: Boschloo's exact test
(:func:`boschloo_one_sided`) of "the fixed runs fail less often than the control" gives
p < ``ALPHA``. A control run counts as failed only when it failed as the report did (its
kind); one failed control and one passing fixed run prove nothing (p = 0.25), and the line
says how many runs would.

The re-run executes the user's program again, with its side effects: the output says so
first. It runs as the invoking user, in the report's working directory, with the current
environment (never the report's redacted copy), and refuses a report whose command is not
known, whose command was redacted, whose user is another, or (without ``--yes``) that came
from ``attach``.

What verify runs is only what the caller already trusts (:func:`trusted_place`): its own
interpreter started isolated (``python -I``: neither the working directory nor
``PYTHONPATH`` nor the user's site directory on ``sys.path``, so a ``json.py`` planted in the
job's folder is never imported by dlwatch; https://docs.python.org/3/using/cmdline.html#cmdoption-I),
in a working directory, and with command files, that no other user can change (each belongs
to the caller or root, writable by no one else, in folders no one else can rename entries
of), never a job whose command changes user (``runuser``, ``sudo``, …), and never an
environment variable from the report outside ``REPORT_ENV_NAMES``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shlex
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tabulate import tabulate

from .. import children, redact
from ..collect import launch, script
from ..config import DEPRECATED
from ..errors import ReportWriteError, WatchdogError
from ..exits import Exit, of_signal
from ..report import browse, writer
from ..report import document as report
from ..text import one_line
from ..types import FIX_LOADER_SETTINGS, Fix, ReportWritten, Sample
from . import throughput_ab

CONTROL, FIXED = "unchanged", "fixed"
# The default bound: twice the batches the original's iterator delivered before it failed,
# and at least this many.
MIN_BATCHES = 50
# A run with no batch count to reach (no inside view in the report) runs this many times as
# long as the original did before it failed, and at least MIN_SECONDS.
SECONDS_FACTOR, MIN_SECONDS = 2.0, 60.0
# Any run is ended after this long, whatever its bound (a job slower than its original).
DEFAULT_MAX_RUN_S = 900.0
# The one-sided p-value below which a fix counts as holding.
ALPHA = 0.05
# The runs of each variant by default: the fewest with which a failure the control repeats
# every time can prove its fix (Boschloo p = 1/64 for 3/3 against 0/3; 2/2 against 0/2 gives
# 1/16).
DEFAULT_RUNS = 3
# The most runs of each variant that verify plans, and that it ever suggests.
MAX_RUNS = 50
# What each run's ``dlwatch run`` writes at its end (``--summary-json``).
SUMMARY_FILE = "run-summary.json"
# Where each run's own output (the job's stdout and stderr, and dlwatch run's lines) goes.
OUTPUT_FILE = "output.log"
SPEED_SAFETY = (
    "dlwatch verify starts your program again, {n} time(s), as you ({user}) in {cwd}: whatever it does besides "
    "training (writing checkpoints, logging to a service, changing data) happens again. Each run is ended after its "
    "batches are counted."
)
SAFETY = (
    "dlwatch verify starts your program again, {n} time(s), as you ({user}) in {cwd}: whatever it does besides "
    "training (writing checkpoints, logging to a service, changing data) happens again. Each run is ended once it "
    "passes the point where the original failed."
)


class VerifyError(WatchdogError):
    """``dlwatch verify`` cannot prove this report's fix: ``what`` names the input (the report
    folder, a ``--fix``); exit code 2."""

    def __init__(self, what: str, message: str) -> None:
        self.what = what
        super().__init__(f"{what}: {message}")


@dataclass(frozen=True)
class Origin:
    """What ``verify`` reads of the original report (``report.json``).

    ``kind``, ``mode`` and ``fix`` are its first diagnosis's; ``command``, ``cwd``, ``uid``
    and ``watched_by`` are how the job was started (``job.launch``); ``sites`` the
    ``file:line`` where main iterated its DataLoaders (the inside view); ``failed_at_batch``
    the batches that main's iterator had delivered when it failed (``None``: no inside view),
    ``batch_size`` that loader's; ``ran_s`` seconds from main's start to the report;
    ``settings`` the watchdog settings the original ran with; ``stdin``, ``mount_ns`` and
    ``cgroup`` what its start had (:class:`~watchdog.types.Launch`; ``""`` unknown)."""

    folder: str
    mode: str
    kind: str
    fix: Optional[Fix]
    location: Optional[str]
    command: Tuple[str, ...]
    cwd: Optional[str]
    uid: Optional[int]
    watched_by: str
    sites: Tuple[str, ...]
    failed_at_batch: Optional[int]
    batch_size: Optional[int]
    ran_s: Optional[float]
    settings: Dict[str, object]
    stdin: str = ""
    mount_ns: str = ""
    cgroup: str = ""
    module_sites: Tuple[str, ...] = ()  # the sites of ``sites`` in a module's top level (``<module>``)


def _iso_seconds(text: Optional[str]) -> Optional[float]:
    import datetime as dt

    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# A report.json larger than this is not one dlwatch wrote (its timeline is bounded).
MAX_REPORT_BYTES = 64 * 2**20
# The watchdog settings a verify run takes from the report: the timings and what to read. Never
# its commands (on_*_exec), its py-spy binary, its report folder or its metrics endpoint: a
# report is a file, and what it says must not choose what dlwatch runs.
RUN_SETTINGS = (
    "interval_s",
    "stall_timeout_s",
    "busy_stall_timeout_s",
    "stall_min_s",
    "stall_p99_factor",
    "cpu_progress_s",
    "memory_read_base_interval_s",
    "timeline_samples",
    "warning_interval_s",
    "stderr_tail_bytes",
    "data_checks",
    "terminate_grace_s",
    "terminate_outside_loader",
)
RUN_PYSPY_SETTINGS = ("native", "timeout_s")
# The environment variables a report's fix (``remedy_apply.env``) may set in a verify run: knobs
# of thread pools and of error reporting, none of which names code to load. Anything else
# (``LD_PRELOAD``, ``PYTHONPATH``, ``BASH_ENV``, a plugin path, …) would let a file choose what
# runs as the caller; the caller may still set any variable with ``--fix env.NAME=VALUE``.
REPORT_ENV_NAMES = frozenset(
    {
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "CUDA_LAUNCH_BLOCKING",
        "NCCL_DEBUG",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_SHOW_CPP_STACKTRACES",
    }
)
# Programs that start what follows them as another user (or in another root): a job started
# through one ran as that user, whatever uid ``dlwatch run`` had, and verify refuses to start it
# again as the caller.
USER_CHANGERS = frozenset(
    {
        "runuser",
        "su",
        "sudo",
        "doas",
        "setpriv",
        "gosu",
        "su-exec",
        "setuidgid",
        "s6-setuidgid",
        "chpst",
        "chroot",
        "nsenter",
        "capsh",
        "machinectl",
        "systemd-run",
        "pkexec",
    }
)


def _owned(path: str, what: str) -> os.stat_result:
    """``lstat`` of ``path``, which must be this user's and writable by no one else.

    Raises:
        VerifyError: a link, another user's, or writable by group or others.
    """
    try:
        st = os.lstat(path)
    except OSError as e:
        raise VerifyError(path, f"cannot read {what}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise VerifyError(path, f"{what} is a symbolic link: name the report folder itself")
    if st.st_uid != os.geteuid():
        raise VerifyError(
            path, f"{what} belongs to uid {st.st_uid}, not to you ({os.geteuid()}): verify runs only your own reports"
        )
    if st.st_mode & 0o022:
        raise VerifyError(path, f"{what} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): not trusted")
    return st


def read_report(folder: str) -> dict:
    """``report.json`` of ``folder``, read only when it can be trusted to say what to run: the
    folder and the file are this user's, writable by no one else, the file a regular one (no
    link, FIFO or device) of at most ``MAX_REPORT_BYTES``.

    Raises:
        VerifyError: naming the folder or file and why.
    """
    _owned(folder, "the report folder")
    path = os.path.join(folder, "report.json")
    try:  # O_NOFOLLOW|O_NONBLOCK, fstat: a regular file, capped (the reader of every report file)
        data, st = browse.read_capped(path, MAX_REPORT_BYTES)
    except OSError as e:
        raise VerifyError(path, f"cannot open: {e.strerror or e}") from None
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise VerifyError(path, "not yours, or writable by others: not trusted")
    try:
        doc = browse.parse_json(data)  # nested too deep is a ValueError, never a RecursionError
    except ValueError as e:
        raise VerifyError(path, f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise VerifyError(path, "not a dlwatch report (not a JSON object)")
    return doc


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or "\0" in value:
        raise ValueError(f"{what} is not a string without NUL")
    return value


def origin_of(folder: str) -> Origin:
    """The :class:`Origin` of the report in ``folder`` (:func:`read_report`).

    Raises:
        VerifyError: the report cannot be trusted or read, is malformed (naming the field), or
            is not of a hang or a crash.
    """
    doc = read_report(folder)
    try:
        return _origin(folder, doc)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        raise VerifyError(os.path.join(folder, "report.json"), f"malformed: {e}") from None


def _origin(folder: str, doc: dict) -> Origin:
    mode = doc.get("mode")
    heads = doc.get("diagnoses")
    head = heads[0] if isinstance(heads, list) and heads and isinstance(heads[0], dict) else {}
    if mode not in ("hang", "crash") and not (mode == "live" and head.get("kind") in throughput_ab.KINDS):
        raise VerifyError(
            folder,
            f"a {mode!s} report: verify proves the fix of a hang or a crash, or the change an input_bound warning "
            "names (by throughput)",
        )
    first = doc["diagnoses"][0]
    kind = _text(first["kind"], "diagnoses[0].kind")
    job = doc.get("job") or {}
    launch = job.get("launch") or {}
    apply = first.get("remedy_apply")
    if apply is not None and not isinstance(apply, dict):
        raise ValueError("remedy_apply is not an object")
    try:
        fix = Fix.from_dict(apply) if apply else None
    except ValueError as e:
        raise ValueError(f"remedy_apply: {e}") from None
    command = launch.get("command") or []
    if not isinstance(command, list):
        raise ValueError("job.launch.command is not a list")
    command = [_text(a, "job.launch.command[]") for a in command]
    cwd = launch.get("cwd")
    uid = launch.get("uid")
    if cwd is not None:
        _text(cwd, "job.launch.cwd")
    if uid is not None and (isinstance(uid, bool) or not isinstance(uid, int)):
        raise ValueError("job.launch.uid is not an integer")
    main_pid = job.get("pid")
    loaders = [v for v in (doc.get("inside_view") or {}).get("loaders") or [] if v.get("pid") == main_pid]
    sites = tuple(dict.fromkeys(f"{v['site']['file']}:{int(v['site']['line'])}" for v in loaders if v.get("site")))
    module_sites = tuple(
        dict.fromkeys(
            f"{v['site']['file']}:{int(v['site']['line'])}"
            for v in loaders
            if v.get("site") and v["site"].get("function") == "<module>"
        )
    )
    current = next((v for v in loaders if v.get("in_next_for_s") is not None), loaders[-1] if loaders else None)
    batches = current.get("batches") if current else None
    if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 0):
        raise ValueError("inside_view.loaders[].batches is not a count")
    size = (current.get("settings") or {}).get("batch_size") if current else None
    settings = (doc.get("watchdog") or {}).get("settings") or {}
    if not isinstance(settings, dict):
        raise ValueError("watchdog.settings is not an object")
    detected = _iso_seconds(doc.get("detected_at") if isinstance(doc.get("detected_at"), str) else None)
    started = _iso_seconds(job.get("start_time") if isinstance(job.get("start_time"), str) else None)
    return Origin(
        folder=folder,
        mode=mode,
        kind=kind,
        fix=fix,
        location=first.get("location") if isinstance(first.get("location"), str) else None,
        command=tuple(command),
        cwd=cwd,
        uid=uid,
        watched_by=str(launch.get("watched_by") or ""),
        sites=sites,
        module_sites=module_sites,
        failed_at_batch=batches,
        batch_size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        ran_s=detected - started if detected is not None and started is not None else None,
        settings=dict(settings),
        stdin=_text(launch.get("stdin") or "", "job.launch.stdin"),
        mount_ns=_text(launch.get("mount_ns") or "", "job.launch.mount_ns"),
        cgroup=_text(launch.get("cgroup") or "", "job.launch.cgroup"),
    )


def parse_fix(items: Sequence[str]) -> Fix:
    """The ``--fix KEY=VALUE`` items as a :class:`Fix`: a DataLoader setting
    (``multiprocessing_context=spawn``, ``num_workers=0``, ``timeout=120``, ``pin_memory=false``),
    ``sharing_strategy=file_system``, ``rlimit_nofile=65536``, or ``env.NAME=VALUE``. Values
    are read as JSON when they parse (numbers, ``true``, ``null``), else as strings.

    Raises:
        VerifyError: an item without ``=``, or an unknown key, naming the item.
    """
    loader: Dict[str, object] = {}
    env: Dict[str, str] = {}
    strategy: Optional[str] = None
    nofile: Optional[int] = None
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise VerifyError(f"--fix {item}", "expected KEY=VALUE")
        try:
            value: object = json.loads(text)
        except ValueError:
            value = text
        if key in FIX_LOADER_SETTINGS:
            loader[key] = value
        elif key == "sharing_strategy":
            strategy = str(value)
        elif key == "rlimit_nofile":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise VerifyError(f"--fix {item}", "rlimit_nofile takes a positive integer")
            nofile = value
        elif key.startswith("env.") and len(key) > 4:
            env[key[4:]] = text
        else:
            known = ", ".join(FIX_LOADER_SETTINGS + ("sharing_strategy", "rlimit_nofile", "env.NAME"))
            raise VerifyError(f"--fix {item}", f"unknown key {key!r} (one of: {known})")
    try:
        return Fix(loader=tuple(loader.items()), sharing_strategy=strategy, env=tuple(env.items()), nofile=nofile)
    except ValueError as e:
        raise VerifyError("--fix", str(e)) from None


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
        """A report was written (``JobWatcher.on_report``): a hang ends the run."""
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


@dataclass(frozen=True)
class RunResult:
    """One verify run: ``variant`` (``unchanged``/``fixed``), its ``index`` (from 1), how it
    went (``outcome``: ``hung``, ``crashed``, ``passed`` — reached its bound —, ``ended`` —
    ended by itself with exit code 0 —, ``timed out`` — ended at ``--max-run-s`` before its
    bound —, or ``failed`` — no summary came back), the first
    report's ``kind``, the job's ``exit_code``, the figures of its summary, whether the fix
    was seen applied (``applied``: the recorder saw the loader settings changed; ``None``
    when there is nothing to see), its report folders, and, for a run that failed with no
    report, the last line of its output (``error``). ``certainty`` is the hang report's
    (``stall.certainty`` in ``report.json``: ``proven`` or ``suspected``; ``""`` for a run that
    did not hang, or whose hang report says neither)."""

    @property
    def before_first_batch(self) -> bool:
        """The run failed before main's loaders delivered a batch, with no report of dlwatch's
        (its kind is only an exit code): the job failed by itself, before the loader."""
        return self.failed and not self.batches and (not self.kind or self.kind.startswith("exit code"))

    variant: str
    index: int
    outcome: str
    kind: str
    exit_code: Optional[int]
    batches: Optional[int]
    samples_per_s: Optional[float]
    first_batch_s: Optional[float]
    elapsed_s: Optional[float]
    applied: Optional[bool]
    reports: Tuple[str, ...]
    error: str = ""  # a run that failed with no report: the last line of its output (redacted)
    # The throughput path (watchdog.commands.throughput_ab): (seconds, batches) at each sample
    # whose count grew, and other processes' CPUs in use on average during the run, of host_cpus.
    progress: Tuple[Tuple[float, int], ...] = ()
    others_cpus: Optional[float] = None
    host_cpus: Optional[int] = None
    certainty: str = ""

    @property
    def failed(self) -> bool:
        """The run hung or crashed (or gave no summary). A run ended at ``--max-run-s``
        (``timed out``) neither failed nor passed."""
        return self.outcome in ("hung", "crashed", "failed")


def fisher_one_sided(control_failed: int, control_runs: int, fixed_failed: int, fixed_runs: int) -> float:
    """The one-sided Fisher exact p-value that the fixed runs fail less often than the
    control: the hypergeometric probability of ``fixed_failed`` or fewer failures among
    ``fixed_runs`` when the runs' failures (``control_failed + fixed_failed``) fall at random
    (R. A. Fisher, *Statistical Methods for Research Workers*, 1925, §21.02; scipy's
    ``fisher_exact(..., alternative="less")`` computes the same)."""
    total, failures = control_runs + fixed_runs, control_failed + fixed_failed
    denominator = math.comb(total, fixed_runs)
    return sum(
        math.comb(failures, k) * math.comb(total - failures, fixed_runs - k) for k in range(0, fixed_failed + 1)
    ) / float(denominator)


def boschloo_one_sided(control_failed: int, control_runs: int, fixed_failed: int, fixed_runs: int) -> float:
    """Boschloo's exact unconditional p-value that the fixed runs fail less often than the
    control: the largest, over the common failure probability q in [0, 1], probability of a
    table whose Fisher p-value (:func:`fisher_one_sided`, the statistic) is at most the one
    observed (R. D. Boschloo, "Raised conditional level of significance for the 2 × 2-table
    when testing the equality of two probabilities", Statistica Neerlandica 24, 1970; scipy's
    ``boschloo_exact(..., alternative="greater")`` computes the same). It is never larger than
    Fisher's, so three runs of each can prove a fix (1/64), where Fisher needs four.

    The supremum is taken on a grid of 2,000 values of q, then refined around the best one.

    Raises:
        ValueError: a count outside ``0 … runs``.
    """
    if not (0 <= control_failed <= control_runs and 0 <= fixed_failed <= fixed_runs):
        raise ValueError("failures must lie between 0 and the runs")
    observed = fisher_one_sided(control_failed, control_runs, fixed_failed, fixed_runs) * (1 + 1e-9)
    extreme = [
        (a, b)
        for a in range(control_runs + 1)
        for b in range(fixed_runs + 1)
        if fisher_one_sided(a, control_runs, b, fixed_runs) <= observed
    ]
    total = control_runs + fixed_runs
    weights = [0] * (total + 1)  # by the failures in all: the tables' count of ways to fall so
    for a, b in extreme:
        weights[a + b] += math.comb(control_runs, a) * math.comb(fixed_runs, b)
    terms = [(k, w) for k, w in enumerate(weights) if w]

    def chance(q: float) -> float:
        return sum(w * q**k * (1 - q) ** (total - k) for k, w in terms)

    grid = 2000
    best_i = max(range(grid + 1), key=lambda i: chance(i / grid))
    finer = [best_i / grid + k / (grid * 50) for k in range(-50, 51)]
    return min(1.0, max(chance(min(1.0, max(0.0, q))) for q in finer))


def runs_needed(control_failed: int, control_runs: int) -> Optional[int]:
    """The fewest runs of each variant (at most ``MAX_RUNS``) with which a control that fails
    as often as this one did (at least once) and fixed runs that all pass reach p < ``ALPHA``
    (:func:`boschloo_one_sided`); ``None`` when the control never failed or no count up to
    ``MAX_RUNS`` would do."""
    if control_failed <= 0 or control_runs <= 0:
        return None
    rate = control_failed / control_runs
    for n in range(DEFAULT_RUNS if rate == 1 else 2, MAX_RUNS + 1):
        if boschloo_one_sided(max(1, math.floor(rate * n)), n, 0, n) < ALPHA:
            return n
    return None


def bound_of(origin: Origin, batches: Optional[int], seconds: Optional[float]) -> Tuple[Optional[int], Optional[float]]:
    """The runs' bound: ``--batches``/``--seconds`` when given; else twice the batches the
    original's iterator had delivered (at least ``MIN_BATCHES``) when the report has an inside
    view, or ``SECONDS_FACTOR`` times the original's running time (at least ``MIN_SECONDS``)."""
    if batches is not None or seconds is not None:
        return batches, seconds
    if origin.failed_at_batch is not None:
        return max(MIN_BATCHES, 2 * origin.failed_at_batch), None
    return None, max(MIN_SECONDS, SECONDS_FACTOR * (origin.ran_s or 0.0))


def _settings_for_runs(origin: Origin) -> Dict[str, object]:
    """The original's watchdog settings for a verify run: its timings only (``RUN_SETTINGS``);
    alert commands, the metrics endpoint and py-spy's path are the defaults (off, found
    beside dlwatch), the hook on, the report folder set per run. ``dlwatch run`` validates
    them (a bad value: the run fails and says so)."""
    out: Dict[str, object] = {k: origin.settings[k] for k in RUN_SETTINGS if k in origin.settings}
    for old, new in DEPRECATED.items():  # a report written before a setting was renamed
        if new in RUN_SETTINGS and old in origin.settings:
            out.setdefault(new, origin.settings[old])
    pyspy = origin.settings.get("py_spy")
    if isinstance(pyspy, dict):
        out["py_spy"] = {k: pyspy[k] for k in RUN_PYSPY_SETTINGS if k in pyspy}
    out["hook"] = True
    out["on_hang"] = "report"  # the run's bound ends a hung run
    return out


def plan(
    origin: Origin, fix: Fix, runs: int, bound: Tuple[Optional[int], Optional[float]], all_loaders: bool
) -> List[Tuple[str, int, List[str], Dict[str, str]]]:
    """The runs, alternating control and fixed: ``(variant, index, dlwatch run arguments after
    ``run``, environment changes)``. The fixed runs' changes are ``DLWATCH_APPLY`` (the loader
    part and sharing strategy, with the sites to apply them at) and the fix's variables."""
    batches, seconds = bound
    apply_doc = {
        "loader": dict(fix.loader),
        "sharing_strategy": fix.sharing_strategy,
        "sites": list(origin.sites),
        "all_loaders": all_loaders,
    }
    out = []
    for i in range(1, runs + 1):
        for variant in (CONTROL, FIXED):
            args = []
            if batches is not None:
                args += ["--stop-after-batches", str(batches)]
            if seconds is not None:
                args += ["--stop-after-s", f"{seconds:g}"]
            env = {}
            if variant == FIXED:
                if fix.loader or fix.sharing_strategy:
                    env["DLWATCH_APPLY"] = json.dumps(apply_doc, separators=(",", ":"))
                env.update(dict(fix.env))
            out.append((variant, i, args, env))
    return out


def _outcome(summary: Optional[dict], docs: List[dict]) -> Tuple[str, str]:
    """``(outcome, first report's kind)`` of a run from its summary and report documents."""
    kinds = [(d.get("mode"), d["diagnoses"][0]["kind"]) for d in docs if d.get("diagnoses")]
    hang = next((k for m, k in kinds if m == "hang"), "")
    crash = next((k for m, k in kinds if m == "crash"), "")
    if summary is None:
        return "failed", hang or crash
    if hang or summary.get("hung"):
        return "hung", hang or str(summary.get("hung"))
    if summary.get("stopped") in ("batches", "seconds"):
        return "passed", ""
    if summary.get("exit_code") == 0:
        return "ended", ""
    return "crashed", crash or f"exit code {summary.get('exit_code')}"


def _certainty(docs: List[dict]) -> str:
    """The first hang report's certainty (``stall.certainty``: ``proven`` or ``suspected``), or
    ``""`` when no hang report says one."""
    for d in docs:
        stall = d.get("stall") if d.get("mode") == "hang" else None
        value = stall.get("certainty") if isinstance(stall, dict) else None
        if value in ("proven", "suspected"):
            return value
    return ""


def inconclusive(r: RunResult, origin: Origin) -> bool:
    """Whether run ``r`` ended in a *suspected* hang whose first diagnosis is not the report's
    kind (``unknown``, most often: a stall nothing explains, such as workers still starting on
    a loaded machine): no evidence that the run fails as the original did, nor that it passes
    (NOTE in docs/verify.md, "Verdict"). A proven hang, a crash, or a hang of the report's own
    kind is a failure whatever its certainty."""
    return r.outcome == "hung" and r.certainty == "suspected" and r.kind != origin.kind


def _applied(fix: Fix, variant: str, summary: Optional[dict]) -> Optional[bool]:
    """Whether the recorder saw the fix's loader settings (``None``: nothing to check)."""
    if variant != FIXED or not fix.loader or summary is None:
        return None
    seen = summary.get("loader_settings") or {}
    if not seen:
        return False
    # Without workers the recorder notes no start method, and prefetching does not apply.
    moot = ("multiprocessing_context", "prefetch_factor", "persistent_workers") if seen.get("num_workers") == 0 else ()
    return all(seen.get(k) == v or str(seen.get(k)) == str(v) for k, v in fix.loader if k not in moot)


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
    directory ``cwd`` that :func:`trusted_place` checked) and wait for it, ending its process
    group after ``max_run_s`` seconds whatever happens. Its output (the job's stdout and stderr,
    and dlwatch's lines) goes to ``OUTPUT_FILE`` there. ``measure_load``: note other processes'
    CPU use meanwhile (:class:`~watchdog.commands.throughput_ab.LoadMeter`)."""
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
    outcome, kind = ("timed out", "") if timed_out and summary is None else _outcome(summary, docs)
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
        applied=_applied(fix, variant, summary),
        reports=tuple(browse.folders(run_dir)),
        error=error,
        progress=throughput_ab.parse_progress(s.get("progress")),
        others_cpus=None if others is None else round(others, 3),
        host_cpus=host,
        certainty=_certainty(docs) if outcome == "hung" else "",
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


@dataclass(frozen=True)
class Verdict:
    """The verdict: ``holds`` (``True``: the fix holds; ``False``: it does not, or it could
    not be proven), its one ``line``, the ``p_value`` for a flaky control (``None``: not
    computed), and the ``change`` to make in the code (``None`` when it does not hold)."""

    holds: bool
    line: str
    p_value: Optional[float]
    change: Optional[str]


def _batches_range(results: Sequence[RunResult]) -> str:
    values = sorted(r.batches for r in results if r.batches is not None)
    if not values:
        return "?"
    return f"batch {values[0]}" if values[0] == values[-1] else f"batches {values[0]}–{values[-1]}"


def change_of(fix: Fix, origin: Origin) -> str:
    """The code change that makes the fix permanent, where to make it."""
    parts = []
    if fix.loader:
        args = ", ".join(f"{k}={v!r}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in fix.loader)
        where = f" for the loader iterated at {origin.sites[0]}" if origin.sites else ""
        parts.append(f"DataLoader(..., {args}){where}")
    if fix.sharing_strategy:
        parts.append(
            f'torch.multiprocessing.set_sharing_strategy("{fix.sharing_strategy}") at the start of the program'
        )
    for k, v in fix.env:
        parts.append(f"{k}={shlex.quote(v)} in the job's environment")
    if fix.nofile is not None:
        parts.append(f"ulimit -n {fix.nofile} (Docker --ulimit nofile={fix.nofile}:{fix.nofile})")
    return "; ".join(parts)


def verdict(origin: Origin, fix: Fix, results: Sequence[RunResult], own_command: bool = False) -> Verdict:
    """Judge the runs: the fix holds when no fixed run failed and Boschloo's one-sided p-value
    (:func:`boschloo_one_sided`) of the control's failures against the fixed runs' is below
    ``ALPHA``, whatever the runs' count: one failed control and one passing fixed run prove
    nothing. A control run counts as failed only when it failed as the report did (the
    report's kind); a fixed run in which the fix was not seen applied proves nothing. A fixed
    run that ended in a suspected hang of another kind (:func:`inconclusive`) is neither a pass
    nor a failure: it is said as such and left out of the test (one run fewer), so it can never
    make the fix "not hold"; a proven hang, a crash, or a hang of the report's kind does.
    ``own_command``: the runs ran the command given after ``--``, not the report's."""
    control = [r for r in results if r.variant == CONTROL]
    unclear = [r for r in results if r.variant == FIXED and inconclusive(r, origin)]
    fixed = [r for r in results if r.variant == FIXED and not inconclusive(r, origin)]
    c_fail, f_fail = sum(r.failed and r.kind == origin.kind for r in control), sum(r.failed for r in fixed)
    total_fixed = len(fixed) + len(unclear)
    unclear_text = ""
    if unclear:
        kinds = ", ".join(sorted({r.kind or "?" for r in unclear}))
        unclear_text = (
            f"; {len(unclear)} fixed run(s) inconclusive: a suspected stall of another kind ({kinds}), not the "
            f"report's ({origin.kind}) and not proven, is no evidence either way and is not counted"
            + (f" (its report: {unclear[0].reports[0]})" if unclear[0].reports else "")
        )
    c_other = sorted({r.kind or r.outcome for r in control if r.failed and r.kind != origin.kind})
    point = f"batch {origin.failed_at_batch}" if origin.failed_at_batch is not None else "its failure"
    what = fix.describe()
    c_kinds = sorted({r.kind for r in control if r.failed and r.kind == origin.kind})
    outcomes = {r.outcome for r in control if r.failed and r.kind == origin.kind}
    verb = "hung" if outcomes == {"hung"} else "crashed" if outcomes == {"crashed"} else "failed"
    as_reported = [r for r in control if r.failed and r.kind == origin.kind]
    control_text = f"unchanged {c_fail}/{len(control)} " + (
        f"{verb} ({', '.join(c_kinds)}) at {_batches_range(as_reported)}" if c_fail else "failed as the report did"
    )
    if c_other:
        control_text += f" ({len([r for r in control if r.failed]) - c_fail} failed otherwise: {', '.join(c_other)})"
    slow = [r for r in results if r.outcome == "timed out"]
    if slow:
        return Verdict(
            False,
            f"not proven: {len(slow)} run(s) reached --max-run-s before their bound (neither hung nor passed): "
            "give a larger --max-run-s, or a smaller --batches or --seconds",
            None,
            None,
        )
    early = next((r for r in results if r.before_first_batch), None)
    if early is not None:
        return Verdict(
            False,
            f"not proven: the {early.variant} run {early.index} failed by itself before its first batch, with no "
            f"report (exit code {early.exit_code}): {early.error or 'no output'}; the runs do not reproduce what the "
            "original had (an input file, a terminal on stdin, a mount, a cgroup): read its output "
            f"({early.variant}-{early.index}/{OUTPUT_FILE} in the verify folder)",
            None,
            None,
        )
    if c_fail == 0:
        advice = (
            "the command given after -- is not the report's: does it reach the same failure?"
            if own_command
            else "flaky: try --runs 10"
        )
        failed_as = "hang" if origin.mode == "hang" else "crash"
        return Verdict(
            False,
            f"not proven: the control did not {failed_as} as the report did ({origin.kind}) in {len(control)} run(s)"
            + (f"; it failed otherwise ({', '.join(c_other)})" if c_other else "")
            + f" ({advice}); with {what} {len(fixed) - f_fail}/{total_fixed} passed{unclear_text}",
            None,
            None,
        )
    unapplied = [r for r in fixed + unclear if r.applied is False]
    if unapplied:
        return Verdict(
            False,
            f"not proven: the fix ({what}) was not seen applied in {len(unapplied)} of {total_fixed} fixed run(s) "
            "(the recorder saw the loader's own settings: its site differs from the report's, or the hook did not "
            "load; try --all-loaders)",
            None,
            None,
        )
    passed = [r for r in fixed if not r.failed]
    original = f"the original {'hung' if origin.mode == 'hang' else 'crashed'} at {point}"
    if passed and all(r.outcome == "ended" for r in passed):
        head, detail = "ran to their end", f"up to {_batches_range(passed)}; {original}"
    elif passed:
        head, detail = f"passed {_batches_range(passed)}", original
    else:
        head, detail = "passed", original
    fixed_text = f"with {what} {len(passed)}/{total_fixed} run(s) {head} ({detail}){unclear_text}"
    if f_fail:
        f_kinds = sorted({r.kind for r in fixed if r.failed and r.kind})
        first = next(r for r in fixed if r.failed)
        other = [k for k in f_kinds if k not in c_kinds]
        why = (
            f"; the fix itself fails otherwise ({', '.join(other)}): read that run's report"
            + (f" ({first.reports[0]})" if first.reports else "")
            if other
            else ""
        )
        return Verdict(
            False,
            f"the fix does not hold: {fixed_text}; {f_fail} failed ({', '.join(f_kinds) or '?'}); {control_text}{why}",
            None,
            None,
        )
    if not fixed:
        return Verdict(
            False,
            f"not proven: {fixed_text}; {control_text}; no fixed run could be judged: run verify again, "
            "on a less loaded machine or with more --runs",
            None,
            None,
        )
    p = boschloo_one_sided(c_fail, len(control), f_fail, len(fixed))
    if p < ALPHA:
        return Verdict(
            True, f"the fix holds (one-sided p={_p(p)}): {fixed_text}; {control_text}", p, change_of(fix, origin)
        )
    needed = runs_needed(c_fail, len(control))
    more = (
        f"--runs {needed} would prove it if the runs go the same way"
        if needed is not None
        else f"a control that fails this seldom cannot prove a fix in {MAX_RUNS} runs"
    )
    return Verdict(
        False,
        f"not proven (one-sided p={_p(p)}, needs p < {ALPHA:g}): {fixed_text}; {control_text}; too few runs: {more}",
        p,
        None,
    )


def _p(p: float) -> str:
    """A p-value for the verdict line: three decimals, or ``<0.001``."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _cost(results: Sequence[RunResult]) -> Optional[str]:
    """The fix's cost, from the runs that did not fail (a hung run's rate measures the hang):
    median samples/s and first-batch latency of each variant with their range (least–most),
    given only with at least ``DEFAULT_RUNS`` such runs of each; the ratio of the medians only
    where the two ranges do not overlap (else the spread, not the fix, may make it). ``None``:
    too few runs to say anything."""

    def spread(values) -> Optional[Tuple[float, float, float]]:
        values = sorted(v for v in values if v is not None)
        return (values[len(values) // 2], values[0], values[-1]) if len(values) >= DEFAULT_RUNS else None

    parts = []
    for name, field, unit in (("samples/s", "samples_per_s", ""), ("first batch", "first_batch_s", " s")):
        c, f = (spread(getattr(r, field) for r in results if r.variant == v and not r.failed) for v in (CONTROL, FIXED))
        if c is None or f is None:
            continue
        text = (
            f"{name} {c[0]:.3g}{unit} ({c[1]:.3g}–{c[2]:.3g}) unchanged, "
            f"{f[0]:.3g}{unit} ({f[1]:.3g}–{f[2]:.3g}) with the fix"
        )
        apart = c[2] < f[1] or f[2] < c[1]
        if apart and c[0]:
            text += f" ({f[0] / c[0]:.2f}x)"
        elif not apart:
            text += " (ranges overlap: no difference shown)"
        parts.append(text)
    return "cost: " + "; ".join(parts) + " (medians, least–most)" if parts else None


def table(results: Sequence[RunResult]) -> str:
    """One row per run (tabulate)."""
    rows = [
        [
            r.variant,
            r.index,
            r.outcome + (f" ({r.kind}{', suspected' if r.certainty == 'suspected' else ''})" if r.kind else ""),
            "-" if r.batches is None else r.batches,
            "-" if r.samples_per_s is None else f"{r.samples_per_s:g}",
            "-" if r.first_batch_s is None else f"{r.first_batch_s:.2f}",
            "-" if r.elapsed_s is None else f"{r.elapsed_s:.0f}",
        ]
        for r in results
    ]
    return tabulate(rows, headers=["variant", "run", "result", "batches", "samples/s", "first batch s", "run s"])


def add_parser(sub) -> None:
    """The ``verify`` subcommand's parser, under ``sub`` (argparse subparsers)."""
    p = sub.add_parser(
        "verify",
        usage="dlwatch verify [options] (REPORT | --last [KIND]) [-- CMD ARGS…]",
        help="prove a report's fix: re-run the job unchanged and with the fix, side by side: dlwatch verify REPORT",
        description="Start the job of a hang or crash report again, under `dlwatch run` with the report's settings: "
        "unchanged, and with the report's fix applied by dlwatch (no edit to your code), alternating, --runs times "
        "each; each run ends once it passes the point where the original failed. Then say whether the fix holds. "
        "THIS RUNS YOUR PROGRAM AGAIN: its side effects (checkpoints, logging services, data it writes) happen again. "
        "Exit codes: 0 the fix holds; 1 it does not, or the control did not fail; 2 bad input (no such report, no "
        "mechanical fix, a job that cannot be re-run).",
    )
    p.add_argument("report", nargs="?", help="a report folder (or a file in it)")
    p.add_argument(
        "--last",
        nargs="?",
        const="",
        metavar="KIND",
        help="the newest report under --report-dir; with KIND, the newest of that kind (fork_inherited_lock, …); "
        "verify prints which report it took",
    )
    p.add_argument("--report-dir", metavar="DIR", default="dlwatch-reports", help="for --last (dlwatch-reports)")
    p.add_argument(
        "--runs",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"runs of each variant ({DEFAULT_RUNS}: the fewest that can prove a fix, p = 1/64 < {ALPHA:g}; for an "
        f"input_bound warning, pairs of runs: {throughput_ab.DEFAULT_PAIRS})",
    )
    p.add_argument(
        "--batches",
        type=_positive_int,
        metavar="K",
        help=f"end each run after K batches (input_bound: K measured after {throughput_ab.WARMUP_BATCHES} of warm-up)",
    )
    p.add_argument("--seconds", type=_positive_float, metavar="S", help="end each run after S seconds")
    p.add_argument(
        "--max-run-s",
        type=_positive_float,
        default=DEFAULT_MAX_RUN_S,
        metavar="S",
        help=f"end any run after S seconds, whatever its bound ({DEFAULT_MAX_RUN_S:g})",
    )
    p.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="apply this instead of, or besides, the report's fix: a DataLoader setting "
        "(multiprocessing_context=spawn, num_workers=0, timeout=120), sharing_strategy=file_system, "
        "rlimit_nofile=65536, env.NAME=VALUE; repeatable",
    )
    p.add_argument("--all-loaders", action="store_true", help="apply the loader part to every DataLoader")
    p.add_argument("--only", action="store_true", help="apply only the --fix items, not the report's fix")
    p.add_argument("--dry-run", action="store_true", help="print each run's command and changes; start nothing")
    p.add_argument("--json", metavar="PATH", help="write the runs and the verdict as JSON")
    p.add_argument(
        "--ladder",
        action="store_true",
        help="input_bound, a num_workers change: double it rung by rung up to the usable CPUs while each rung gains",
    )
    p.add_argument(
        "--busy-limit",
        type=_share,
        default=throughput_ab.WITHHOLD_SHARE,
        metavar="SHARE",
        help="input_bound: withhold the verdict when other processes used this share of the CPUs or more during the "
        f"runs (0 to 1; {throughput_ab.WITHHOLD_SHARE:g}; 1: never)",
    )
    p.add_argument("--yes", action="store_true", help="re-run a job whose report came from `dlwatch attach`")
    p.set_defaults(cmd=[])  # what follows `--`: the command to run instead of the report's (split off by the CLI)


def _positive_int(text: str) -> int:
    from ..argtypes import positive_int

    return positive_int(text)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share in (0, 1]")
    return value


def _positive_float(text: str) -> float:
    from ..argtypes import positive_float

    return positive_float(text)


def fix_cannot_apply(origin: Origin, fix: Fix) -> Optional[str]:
    """Why ``fix`` cannot work on this job, known before any run, or ``None``: a start method
    that re-imports the main script (``forkserver``, ``spawn``) for a DataLoader iterated at
    the top level of a script with no main guard around it (:func:`unguarded_site`)."""
    method = dict(fix.loader).get("multiprocessing_context")
    if method not in ("forkserver", "spawn"):
        return None
    unguarded = [site for site in origin.module_sites if script.unguarded_site(site)]
    if not unguarded:
        return None
    return (
        f"multiprocessing_context={method!r} cannot work on this job: the DataLoader is iterated at the top level of "
        f'{unguarded[0]} with no `if __name__ == "__main__":` around it, so each {method} worker imports the '
        "script again and runs the loop itself. Put the loop under a main guard, or take the report's other remedy "
        "(create the lock, pool or client in the worker: worker_init_fn, or lazily in __getitem__)"
    )


def differences(origin: Origin) -> List[str]:
    """Lines that say, before any run, what the runs will not have that the original had: a
    terminal on stdin (the runs get ``/dev/null``), another mount namespace (allowed with
    ``--yes``), another cgroup (its memory and pids limits may differ)."""
    _, own_ns, own_cgroup = launch.context()
    out = []
    if origin.stdin == "terminal":
        out.append("note: the original had a terminal on stdin; the runs get /dev/null")
    elif origin.stdin in ("file", "pipe", "socket"):
        out.append(f"note: the original read stdin from a {origin.stdin}; the runs get /dev/null")
    if origin.mount_ns and own_ns and origin.mount_ns != own_ns:
        out.append(
            f"note: the original ran in another mount namespace ({origin.mount_ns}); the runs read and write this "
            f"one's ({own_ns}) files and disks"
        )
    if origin.cgroup and own_cgroup and origin.cgroup != own_cgroup:
        out.append(
            f"note: the original ran in cgroup {redact.value(origin.cgroup)}, the runs in {redact.value(own_cgroup)}: "
            "their memory and pids limits may differ, and with them an out-of-memory or a failed fork"
        )
    return [one_line(line) for line in out]


def trusted_place(path: str, what: str) -> str:
    """The real path of ``path`` (the folder a run starts in, or a file its command names),
    once it is clear that no other user can change what is found there: ``path`` and every
    folder above it belong to the caller or to root; ``path`` is writable by no one else; each
    folder above it is writable by no one else, or has the sticky bit (others cannot rename or
    remove what is ours there: unlink(2), rename(2), EPERM). Group-writable counts as writable
    by others. Links are resolved first, and the runs use the real path, so a link swapped
    later changes nothing.

    Raises:
        VerifyError: naming ``path``, the folder or file at fault, and why.
    """
    real = os.path.realpath(path)
    me = os.geteuid()
    chain = [real]
    while chain[-1] != os.path.dirname(chain[-1]):
        chain.append(os.path.dirname(chain[-1]))
    for place in reversed(chain):
        try:
            st = os.lstat(place)
        except OSError as e:
            raise VerifyError(path, f"cannot read {what} ({place}): {e.strerror or e}") from None
        if stat.S_ISLNK(st.st_mode):
            raise VerifyError(path, f"{what}: {place} changed while it was checked (now a link)")
        if st.st_uid not in (me, 0):
            raise VerifyError(
                path,
                f"{what}: {place} belongs to uid {st.st_uid}, not to you ({me}) or root: what it holds runs as you",
            )
        shared = st.st_mode & 0o022
        if shared and (place == real or not st.st_mode & stat.S_ISVTX):
            raise VerifyError(
                path,
                f"{what}: {place} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): another user could "
                "change what runs as you; move the job into a folder of your own",
            )
    return real


def _command_files(command: Sequence[str], cwd: str) -> List[Tuple[str, str]]:
    """``(argument, path)`` for each argument of ``command`` that names an existing file
    (relative to ``cwd`` or absolute): the program, its script, its config files."""
    out = []
    for arg in command:
        if not arg or arg.startswith("-"):
            continue
        path = arg if os.path.isabs(arg) else os.path.join(cwd, arg)
        if os.path.isfile(path):
            out.append((arg, path))
    return out


def _check_rerunnable(origin: Origin, command: Sequence[str], yes: bool) -> str:
    """Refuse what must not be re-run (see the module docstring); returns the real path of
    the working directory the runs start in (:func:`trusted_place`).

    Raises:
        VerifyError: naming the report (or the folder or file at fault) and why.
    """
    if not command:
        raise VerifyError(origin.folder, "the report does not say how the job was started: pass it after --")
    if any(redact.REDACTED in a for a in command):
        raise VerifyError(
            origin.folder,
            "the job's command held a secret, redacted in the report: pass the command after -- (dlwatch verify "
            "REPORT -- CMD ARGS…)",
        )
    if origin.uid is not None and origin.uid != os.getuid():
        raise VerifyError(
            origin.folder, f"the job ran as uid {origin.uid}, not as you ({os.getuid()}): run verify as it"
        )
    changer = os.path.basename(command[0])
    if changer in USER_CHANGERS:
        raise VerifyError(
            origin.folder,
            f"the job was started through {changer}, as another user: run verify as that user, with the command "
            "after -- (dlwatch verify REPORT -- CMD ARGS…)",
        )
    if origin.cwd is None or not os.path.isdir(origin.cwd):
        raise VerifyError(origin.folder, f"the job's working directory {origin.cwd!r} is not there")
    if origin.watched_by == "attach" and not yes:
        raise VerifyError(
            origin.folder,
            "this report came from `dlwatch attach`: its command line may not start the job as it was started "
            "(a launcher, a container entry point); check it, then add --yes",
        )
    _, own_ns, _ = launch.context()
    if origin.stdin in ("file", "pipe", "socket") and not yes:
        raise VerifyError(
            origin.folder,
            f"the original read its standard input from a {origin.stdin}, which verify cannot replay (the runs get "
            "/dev/null): check that the job does not need it, then add --yes",
        )
    if origin.mount_ns and own_ns and origin.mount_ns != own_ns and not yes:
        raise VerifyError(
            origin.folder,
            f"the original ran in another mount namespace ({origin.mount_ns}; verify runs in {own_ns}: a container "
            "or unshare): its files and mounts are not these, and what the runs write lands on this one's disks; "
            "run verify in that namespace, or add --yes",
        )
    cwd = trusted_place(origin.cwd, "the job's working directory")
    for arg, path in _command_files(command, cwd):
        trusted_place(path, f"the command's file {redact.value(arg)!r}")
    return cwd


def cmd_verify(args: argparse.Namespace, say=print) -> int:
    """``dlwatch verify``: see the module docstring; returns the exit code.

    Raises:
        VerifyError, ReportNotFound: bad input (exit code 2, said by the caller).
    """
    last = args.last is not None
    if last == bool(args.report):
        raise VerifyError("REPORT", "give a report folder or --last [KIND] (one of them)")
    try:
        found = browse.folders(args.report_dir) if last else []
    except WatchdogError as e:
        raise VerifyError("--last", f"{e} (--report-dir DIR names where the reports are)") from None
    if last and args.last:
        found = [f for f in found if _first_kind(f) == args.last]
    folder = found[0] if found else None
    if last and folder is None:
        of_kind = f" of kind {args.last}" if args.last else ""
        raise VerifyError(args.report_dir, f"no report{of_kind} there (--report-dir DIR names where the reports are)")
    folder = os.path.abspath(browse.report_folder(folder or args.report))
    origin = origin_of(folder)
    own = parse_fix(args.fix)
    fix = origin.fix.merged(own) if origin.fix is not None and not args.only else own
    if fix == Fix():
        raise VerifyError(
            folder,
            f"{origin.kind} has no mechanical fix: its remedy is a change to the code (read the report's fix); "
            "try your own idea with --fix KEY=VALUE",
        )
    cannot = fix_cannot_apply(origin, fix)
    if cannot:
        raise VerifyError(folder, cannot)
    if fix.loader and not origin.sites and not args.all_loaders:
        raise VerifyError(folder, "the report names no DataLoader site (no inside view): add --all-loaders")
    untrusted = sorted(
        k for k, _ in (origin.fix.env if origin.fix and not args.only else ()) if k not in REPORT_ENV_NAMES
    )
    if untrusted:
        raise VerifyError(
            folder,
            f"the report's fix sets {', '.join(untrusted)}, which verify never takes from a file (it could choose what "
            "runs as you): set it yourself with --fix env.NAME=VALUE if you mean it",
        )
    command = list(args.cmd) or list(origin.command)
    own_command = bool(args.cmd) and tuple(args.cmd) != origin.command
    cwd = _check_rerunnable(origin, command, args.yes)
    if args.json and (os.path.isdir(args.json) or not os.path.isdir(os.path.dirname(os.path.abspath(args.json)))):
        raise VerifyError(f"--json {args.json}", "must name a file in a folder that exists")
    shown = _shown(fix)  # what is printed and written: secret-named variables redacted
    shown_command = shlex.join(redact.cmdline(command))
    by_speed = origin.kind in throughput_ab.KINDS  # proven by throughput (NOTE [ Throughput A/B ])
    if by_speed:
        speed = throughput_ab.bound_for(origin.failed_at_batch, origin.ran_s, args.batches, args.seconds)
        bound: Tuple[Optional[int], Optional[float]] = (speed.batches, speed.seconds)
        runs = plan(origin, fix, args.runs or throughput_ab.DEFAULT_PAIRS, bound, args.all_loaders)
    else:
        bound = bound_of(origin, args.batches, args.seconds)
        runs = plan(origin, fix, args.runs or DEFAULT_RUNS, bound, args.all_loaders)
    uid_name = _user_name()
    if args.dry_run:
        say(f"dlwatch verify would start your program {len(runs)} time(s), as {uid_name} in {cwd}:")
    else:
        say((SPEED_SAFETY if by_speed else SAFETY).format(n=len(runs), user=uid_name, cwd=cwd))
    newest = f" (--last{' ' + args.last if args.last else ''}: the newest of {len(found)})" if last else ""
    say(f"report: {folder} ({origin.kind}, {origin.mode}){newest}; fix: {shown.describe()}")
    for line in differences(origin):
        say(line)
    if own_command:
        given = shlex.join(redact.cmdline(origin.command)) or "?"
        say(f"the command: {shown_command} (given after --; the report's was {given})")
    if args.dry_run:
        verify_dir = os.path.join(os.path.dirname(folder), "VERIFY")
        for variant, i, run_args, env in runs:
            changes = " ".join(f"{k}={shlex.quote(v)}" for k, v in redact.env(env).items())
            limit = f" (RLIMIT_NOFILE {fix.nofile})" if variant == FIXED and fix.nofile is not None else ""
            run_dir = os.path.join(verify_dir, f"{variant}-{i}")
            argv = run_argv(os.path.join(verify_dir, "settings.yaml"), run_dir, run_args, redact.cmdline(command))
            say(f"{variant} {i}: {changes + ' ' if changes else ''}{shlex.join(argv)}{limit}")
        say(f"(VERIFY: a new verify-<UTC time>-<pid>-<random>/ folder beside the report, 0700; cwd {cwd})")
        return Exit.OK
    if by_speed:
        return verify_throughput(args, origin, fix, cwd, command, speed, say)
    out = _verify_folder(folder)
    settings_path = os.path.join(out, "settings.yaml")
    _write_settings(settings_path, _settings_for_runs(origin))
    results: List[RunResult] = []
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for variant, i, run_args, env in runs:
            say(f"run {len(results) + 1}/{len(runs)}: {variant} {i} …")
            result = run_one(origin, cwd, variant, i, run_args, env, fix, out, settings_path, command, args.max_run_s)
            results.append(result)
            say(
                f"  {result.outcome}"
                + (f" ({result.kind})" if result.kind else "")
                + (
                    ", suspected: inconclusive (a stall of another kind than the report's, not counted)"
                    if variant == FIXED and inconclusive(result, origin)
                    else ""
                )
                + f", {result.batches} batches; its output: {os.path.join(out, f'{variant}-{i}', OUTPUT_FILE)}"
            )
    except _Stopped as e:
        say(f"dlwatch: verify stopped by {signal.Signals(e.signum).name}; the run in progress was ended ({out})")
        return of_signal(e.signum)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    judged = verdict(origin, shown, results, own_command)
    say("")
    say(table(results))
    say("")
    say(judged.line)
    cost = _cost(results) if judged.holds else None
    if cost:
        say(cost)
    left = _shm_left(results)
    if left:
        say(left)
    if judged.change:
        say(f"make it permanent: {judged.change}")
    say(f"runs and their reports: {out}")
    doc = {
        "report": folder,
        "kind": origin.kind,
        "fix": shown.as_dict(),
        "bound": {"batches": bound[0], "seconds": bound[1]},
        "runs": [dataclasses.asdict(r) for r in results],
        "holds": judged.holds,
        "verdict": judged.line,
        "p_value": judged.p_value,
        "change": judged.change,
        "cost": cost,
        "folder": out,
    }
    try:
        writer.write_json(os.path.join(out, writer.VERIFY_FILE), redact.document(doc))
        writer.write_verify(folder, redact.document(doc))  # `dlwatch reports` and `show` say it
        if args.json:
            writer.write_json(os.path.abspath(args.json), redact.document(doc))
    except ReportWriteError as e:
        say(f"dlwatch: {e}")
    return Exit.OK if judged.holds else Exit.FAILED


def _rung_runs(
    origin: Origin, base: Optional[Fix], fix: Fix, runs: int, bound: Tuple[Optional[int], Optional[float]], every: bool
) -> List[Tuple[str, int, List[str], Dict[str, str]]]:
    """:func:`plan` for a rung of the throughput path: ``fix`` in the fixed runs, ``base`` (the
    last change that gained; ``None``: none, the job as it is) in the others."""
    out = plan(origin, fix, runs, bound, every)
    if base is None:
        return out
    base_env = plan(origin, base, 1, bound, every)[1][3]
    return [(v, i, a, dict(base_env) if v == CONTROL else e) for v, i, a, e in out]


def _speed_run(r: RunResult, warmup: int) -> throughput_ab.Run:
    """``r`` as the throughput statistics see it: its rate past ``warmup`` batches, and why it
    does not count (it failed, reached ``--max-run-s``, or did not have the change applied)."""
    measured = throughput_ab.rate_past_warmup(r.progress, warmup)
    problem = ""
    if r.failed:
        problem = f"{r.outcome}" + (f" ({r.kind})" if r.kind else "") + (f": {r.error}" if r.error else "")
    elif r.outcome == "timed out":
        problem = "reached --max-run-s before its bound: give a larger --max-run-s or fewer --batches"
    elif r.applied is False:
        problem = (
            "did not have the change applied (the recorder saw the loader's own settings: its site differs from "
            "the report's, or the hook did not load; try --all-loaders)"
        )
    return throughput_ab.Run(
        "B" if r.variant == FIXED else "A",
        r.index,
        None if measured is None else measured[0] / measured[1],
        r.others_cpus,
        r.host_cpus,
        problem,
    )


def verify_throughput(
    args: argparse.Namespace,
    origin: Origin,
    fix: Fix,
    cwd: str,
    command: Sequence[str],
    bound: throughput_ab.Bound,
    say=print,
) -> int:
    """The throughput path of ``dlwatch verify`` for an ``input_bound`` warning (NOTE [
    Throughput A/B ]): alternating runs without and with ``fix``, each ended at ``bound``;
    with ``--ladder`` and a ``num_workers`` change, rung after rung while each gains. Writes
    ``verify.json`` as the failure path does, with ``throughput`` (and ``rungs``). Returns 0
    when a gain is shown, else 1; 128 + N when stopped by a signal."""
    out = _verify_folder(origin.folder)
    settings_path = os.path.join(out, "settings.yaml")
    _write_settings(settings_path, _settings_for_runs(origin))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = dict(fix.loader).get("num_workers")
    only_workers = len(fix.loader) == 1 and isinstance(workers, int) and not (fix.env or fix.sharing_strategy)
    climb = bool(getattr(args, "ladder", False))
    ladder = throughput_ab.ladder_candidates(workers, usable) if climb and only_workers else None  # type: ignore[arg-type]
    if climb and ladder is None:
        say("note: --ladder climbs num_workers only; the change has other parts: one A/B of it")
    pairs = args.runs or throughput_ab.DEFAULT_PAIRS
    say(
        f"each run: {bound.warmup} batches of warm-up, then {bound.measured} measured (or {bound.seconds:g} s); "
        f"{pairs} pair(s) of runs, without then with the change"
        + (f"; the ladder: num_workers {', '.join(map(str, ladder))} (up to {usable} usable CPUs)" if ladder else "")
    )
    rungs: List[dict] = []
    steps: List[Tuple[int, str]] = []  # the ladder's (num_workers, state) so far
    all_results: List[RunResult] = []
    base: Optional[Fix] = None
    current = fix
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            k = len(rungs) + 1
            where = os.path.join(out, f"rung-{k}") if ladder else out
            if ladder:
                os.makedirs(where, mode=0o700)
                against = _shown(base).describe() if base else "the job as it is"
                say(f"rung {k}: {_shown(current).describe()} against {against}")
            runs = _rung_runs(origin, base, current, pairs, (bound.batches, bound.seconds), args.all_loaders)
            results: List[RunResult] = []
            for variant, i, run_args, env in runs:
                say(f"run {len(results) + 1}/{len(runs)}: {variant} {i} …")
                r = run_one(
                    origin, cwd, variant, i, run_args, env, current, where, settings_path, command, args.max_run_s, True
                )
                results.append(r)
                seen = _speed_run(r, bound.warmup)
                say(
                    f"  {r.outcome}"
                    + (f" ({r.kind})" if r.kind else "")
                    + f", {r.batches} batches"
                    + (
                        f", {seen.rate:.3g} batches/s past the first {bound.warmup}"
                        if seen.rate
                        else ", rate not measured"
                    )
                    + (f"; others used {r.others_cpus:.2f} CPUs" if r.others_cpus is not None else "")
                    + f"; its output: {os.path.join(where, f'{variant}-{i}', OUTPUT_FILE)}"
                )
            all_results += results
            what = _shown(current).describe()
            judged = throughput_ab.judge(
                [_speed_run(r, bound.warmup) for r in results],
                what,
                getattr(args, "busy_limit", None) or throughput_ab.WITHHOLD_SHARE,
            )
            say("")
            say(table(results))
            say(judged.load_line)
            say(judged.line)
            rungs.append(
                {"fix": _shown(current).as_dict(), "base": _shown(base).as_dict() if base else None, **judged.as_dict()}
            )
            if ladder is None:
                break
            steps.append((ladder[k - 1], judged.state))
            best, climb = throughput_ab.ladder_pick(steps)
            if not climb or k >= len(ladder):
                break
            base, current = current, Fix(loader=(("num_workers", ladder[k]),))
    except _Stopped as e:
        say(f"dlwatch: verify stopped by {signal.Signals(e.signum).name}; the run in progress was ended ({out})")
        return of_signal(e.signum)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if ladder is not None:
        best, _ = throughput_ab.ladder_pick(steps)
        chosen = None if best is None else Fix(loader=(("num_workers", best),))
        line = (
            f"the ladder: num_workers={best} is the last that gained ({len(rungs)} rung(s)); the last rung: "
            f"{rungs[-1]['line']}"
            if best is not None
            else f"the ladder: the first rung showed no gain: {rungs[0]['line']}"
        )
    else:
        chosen = fix if rungs[0]["state"] == throughput_ab.GAIN else None
        line = str(rungs[0]["line"])
    change = change_of(chosen, origin) if chosen is not None else None
    if ladder is not None:
        say(line)
    if change:
        say(f"make it permanent: {change}")
    say(f"runs and their reports: {out}")
    doc = {
        "report": origin.folder,
        "kind": origin.kind,
        "fix": _shown(fix).as_dict(),
        "bound": {"batches": bound.batches, "seconds": bound.seconds, "warmup_batches": bound.warmup},
        "runs": [dataclasses.asdict(r) for r in all_results],
        "holds": chosen is not None,
        "verdict": line,
        "p_value": None,
        "change": change,
        "cost": None,
        "throughput": rungs[_last_gain(rungs) if chosen is not None else -1],
        "rungs": rungs if ladder is not None else None,
        "folder": out,
    }
    try:
        writer.write_json(os.path.join(out, writer.VERIFY_FILE), redact.document(doc))
        writer.write_verify(origin.folder, redact.document(doc))
        if args.json:
            writer.write_json(os.path.abspath(args.json), redact.document(doc))
    except ReportWriteError as e:
        say(f"dlwatch: {e}")
    return Exit.OK if chosen is not None else Exit.FAILED


def _last_gain(rungs: Sequence[dict]) -> int:
    """The index of the last rung that gained in the unbroken run of gains from the first."""
    last = 0
    for i, rung in enumerate(rungs):
        if rung["state"] != throughput_ab.GAIN:
            break
        last = i
    return last


class _Stopped(BaseException):
    """SIGTERM or SIGHUP reached ``verify`` while a run was in progress: the run is ended
    (:func:`watchdog.children.end_tree`) and verify exits 128 + N."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum, _frame) -> None:
    raise _Stopped(signum)


def _first_kind(folder: str) -> str:
    """The kind of the first diagnosis of the report in ``folder``, ``""`` when unreadable."""
    try:
        doc = browse.load(folder)
    except WatchdogError:
        return ""
    first = (doc.get("diagnoses") or [{}])[0]
    return str(first.get("kind") or "") if isinstance(first, dict) else ""


def _shown(fix: Fix) -> Fix:
    """``fix`` as it is printed and written: variables with secret-looking names (or values)
    redacted (:func:`watchdog.redact.env`)."""
    return dataclasses.replace(fix, env=tuple(redact.env(dict(fix.env)).items()))


def _verify_folder(folder: str) -> str:
    """A new folder ``verify-<UTC time>-<pid>-<random>`` (0700) beside the report ``folder``,
    where nobody else can move or replace it: its parent must be this user's (or root's) and
    writable by no one else, or carry the sticky bit (``/tmp``'s: others cannot rename what is
    ours).

    Raises:
        VerifyError: the parent is not such a folder, or the new folder cannot be made.
    """
    import tempfile

    parent = os.path.dirname(folder)
    try:
        st = os.stat(parent)
    except OSError as e:
        raise VerifyError(parent, f"cannot read it: {e.strerror or e}") from None
    others_write = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
    if st.st_uid not in (os.geteuid(), 0) or others_write:
        raise VerifyError(
            parent,
            "another user could move or replace what verify writes here (not yours, or writable by others without "
            "the sticky bit): move the report into a folder of your own",
        )
    try:
        return tempfile.mkdtemp(prefix=f"verify-{report.folder_name(time.time(), os.getpid())}-", dir=parent)
    except OSError as e:
        raise VerifyError(parent, f"cannot create the verify folder: {e.strerror or e}") from None


def _shm_left(results: Sequence[RunResult]) -> Optional[str]:
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


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


def _write_settings(path: str, settings: Dict[str, object]) -> None:
    """The runs' settings file (YAML, ``0600``)."""
    import yaml

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(settings, f, sort_keys=True)
