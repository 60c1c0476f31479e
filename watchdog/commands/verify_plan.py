"""What ``dlwatch verify`` plans before any run, pure (no I/O): the report's :class:`Origin`
(from the ``report.json`` document, :func:`origin_from`; the file itself is read, once it can be
trusted, by :func:`watchdog.commands.verify_trust.origin_of`), the ``--fix`` items
(:func:`parse_fix`), the runs' bound (:func:`bound_of`) and watchdog settings
(:func:`settings_for_runs`), and the runs themselves, control and fixed alternating
(:func:`plan`). The report's layout is dlwatch's own (``report.json``,
:mod:`watchdog.report.document`); the fix is :class:`~watchdog.types.Fix`, declared by the rule
beside its remedy.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .. import redact
from ..config import DEPRECATED
from ..errors import WatchdogError
from ..text import one_line
from ..types import FIX_LOADER_SETTINGS, Fix
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
# Where each run's own output (the job's stdout and stderr, and dlwatch run's lines) goes.
OUTPUT_FILE = "output.log"
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


# The variables of REPORT_ENV_NAMES that set a thread count: a report's fix may give each only an
# integer in 1..MAX_THREADS; num_workers only 0..MAX_THREADS.
THREAD_ENV_NAMES = frozenset(
    {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"}
)
MAX_THREADS = 1024


def check_counts(fix: Fix, where: str) -> None:
    """Refuse a fix whose thread-count variables (``THREAD_ENV_NAMES``) or ``worker_threads``
    are not integers in ``1..MAX_THREADS`` (written in decimal digits) or whose ``num_workers``
    is not an integer in ``0..MAX_THREADS``; ``where`` names the fix (``remedy_apply``,
    ``--fix``).

    Raises:
        ValueError: naming the field.
    """
    for name, value in fix.env:
        if name in THREAD_ENV_NAMES:
            text = str(value)
            if not (text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= MAX_THREADS):
                raise ValueError(f"{where}.env.{name} is not an integer from 1 to {MAX_THREADS}: {text[:40]!r}")
    workers = dict(fix.loader).get("num_workers")
    if "num_workers" in dict(fix.loader) and (
        not isinstance(workers, int) or isinstance(workers, bool) or not 0 <= workers <= MAX_THREADS
    ):
        raise ValueError(f"{where}.loader.num_workers is not an integer from 0 to {MAX_THREADS}: {str(workers)[:40]!r}")
    if fix.worker_threads is not None and not 1 <= fix.worker_threads <= MAX_THREADS:
        raise ValueError(f"{where}.worker_threads is not an integer from 1 to {MAX_THREADS}: {fix.worker_threads!r}")


# The most characters of an error's message: a report's value quoted in it may be megabytes.
_MESSAGE_MAX = 500


class VerifyError(WatchdogError):
    """``dlwatch verify`` cannot prove this report's fix: ``what`` names the input (the report
    folder, a ``--fix``); exit code 2. The message is one line of at most ``_MESSAGE_MAX``
    characters after ``what`` (the rest counted, not shown)."""

    def __init__(self, what: str, message: str) -> None:
        self.what = what
        # one line, control characters escaped: the report, its paths and its values may be
        # another's (watchdog.text.one_line)
        message = one_line(message)
        if len(message) > _MESSAGE_MAX:
            message = f"{message[:_MESSAGE_MAX]}… ({len(message) - _MESSAGE_MAX} more characters)"
        super().__init__(one_line(f"{what}: {message}"))


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


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or "\0" in value:
        raise ValueError(f"{what} is not a string without NUL")
    return value


def origin_from(folder: str, doc: dict) -> Origin:
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
    if fix is not None:
        check_counts(fix, "diagnoses[0].remedy_apply")
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
    ``sharing_strategy=file_system``, ``rlimit_nofile=65536``, ``worker_threads=1``
    (``torch.set_num_threads`` in each worker), or ``env.NAME=VALUE``. Values
    are read as JSON when they parse (numbers, ``true``, ``null``), else as strings.

    Raises:
        VerifyError: an item without ``=``, or an unknown key, naming the item.
    """
    loader: Dict[str, object] = {}
    env: Dict[str, str] = {}
    strategy: Optional[str] = None
    nofile: Optional[int] = None
    threads: Optional[int] = None
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
        elif key == "worker_threads":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise VerifyError(f"--fix {item}", "worker_threads takes a positive integer")
            threads = value
        elif key.startswith("env.") and len(key) > 4:
            env[key[4:]] = text
        else:
            known = ", ".join(FIX_LOADER_SETTINGS + ("sharing_strategy", "rlimit_nofile", "worker_threads", "env.NAME"))
            raise VerifyError(f"--fix {item}", f"unknown key {key!r} (one of: {known})")
    try:
        fix = Fix(
            loader=tuple(loader.items()),
            sharing_strategy=strategy,
            env=tuple(env.items()),
            nofile=nofile,
            worker_threads=threads,
        )
        check_counts(fix, "--fix")
    except ValueError as e:
        raise VerifyError("--fix", str(e)) from None
    return fix


def bound_of(origin: Origin, batches: Optional[int], seconds: Optional[float]) -> Tuple[Optional[int], Optional[float]]:
    """The runs' bound: ``--batches``/``--seconds`` when given; else twice the batches the
    original's iterator had delivered (at least ``MIN_BATCHES``) when the report has an inside
    view, or ``SECONDS_FACTOR`` times the original's running time (at least ``MIN_SECONDS``)."""
    if batches is not None or seconds is not None:
        return batches, seconds
    if origin.failed_at_batch is not None:
        return max(MIN_BATCHES, 2 * origin.failed_at_batch), None
    return None, max(MIN_SECONDS, SECONDS_FACTOR * (origin.ran_s or 0.0))


def settings_for_runs(origin: Origin) -> Dict[str, object]:
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
    part, sharing strategy and workers' thread count, with the sites to apply them at) and the
    fix's variables."""
    batches, seconds = bound
    apply_doc = {
        "loader": dict(fix.loader),
        "sharing_strategy": fix.sharing_strategy,
        "worker_threads": fix.worker_threads,
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
                if fix.loader or fix.sharing_strategy or fix.worker_threads is not None:
                    env["DLWATCH_APPLY"] = json.dumps(apply_doc, separators=(",", ":"))
                env.update(dict(fix.env))
            out.append((variant, i, args, env))
    return out


def fix_as_shown(fix: Fix) -> Fix:
    """``fix`` as it is printed and written: variables with secret-looking names (or values)
    redacted (:func:`watchdog.redact.env`)."""
    return dataclasses.replace(fix, env=tuple(redact.env(dict(fix.env)).items()))
