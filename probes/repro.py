"""``dlwatch probe repro NAME|--all``: run each known failure class under the watchdog and
check that the expected diagnosis comes first.

A client: it starts the target ``probes.train`` with a fault under
``python -m watchdog run`` with short timeouts, reads the report(s), and prints one row per
scenario: expected kind, what came first, the detection latency (from the moment the job
printed that it injected the fault, or from its start) and the report folder. Scenarios that
need what this machine lacks (a GPU; root for a private ``/dev/shm``) are reported as skipped,
never as passed.

Where things go: each scenario's reports, its job's stdout and its settings file go to
``REPORT_DIR/NAME/`` (``--report-dir``, default ``dlwatch-reports/repro-<UTC time>`` under the
working directory), and the job runs with that folder as its working directory; its modules are
found through ``PYTHONPATH`` (:func:`probes.env.child_env`), so any working directory and a
non-editable install work alike. A scenario the reports settle while the job still runs is
ended as a user would end it: SIGTERM to ``dlwatch``, which forwards it to the job and removes
its own temporary folders; whatever is left after ``STOP_GRACE_S`` is killed.

With ``--verify``, each report whose first diagnosis declares a mechanical fix is then given
to ``dlwatch verify`` (:func:`verify_report`), and the table says whether the fix held.

Exit codes (:class:`watchdog.exits.Exit`): 0 every scenario diagnosed as expected (or skipped),
and with ``--verify`` every declared fix held; 1 one or more misdiagnosed (or a fix that did
not hold); 2 an unknown scenario name or bad flag (one line).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from tabulate import tabulate

from watchdog.exits import Exit

from . import cases, module_name
from .cli import Parser, folder, say_estimate
from .env import child_env, python

SHM_WRAPPER = 'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$@"'
# Moves the job into a memory cgroup v1 folder of its own with a limit, then runs it.
MEMCG_WRAPPER = (
    'mkdir -p "$1" && echo {limit} > "$1/memory.limit_in_bytes" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
)


@dataclass(frozen=True)
class Scenario:
    """One reproduction: the job's arguments, the watchdog's, and the kind expected first.

    ``severity`` is ``hang``, ``crash``, ``exit`` (a report after the job ended, any exit code),
    ``warning`` (the kind must appear among the warnings, and the job runs on), ``none`` (a
    healthy control: no report at all, and the job exits 0) or ``unharmed`` (reports allowed,
    none proven or terminating, and the job exits 0). ``module`` is the target run with
    ``python -m`` (``probes.train`` with ``job`` as its flags, or a ``probes.cases`` target).
    ``shm_size`` runs the job in a private mount namespace with a tmpfs of that size on /dev/shm
    (needs root or CAP_SYS_ADMIN); ``needs_mount`` is a target that mounts a file system in a
    mount namespace of its own (skipped where none can be made). ``skip`` is why it cannot run on
    a CPU machine (then there is a fixture test instead); ``needs_cuda`` skips it where torch sees no GPU (the GPU kinds
    also have fixture tests). ``certainty``, ``location`` (a source fragment) and ``remedy``
    (words the first diagnosis's remedy must hold, and ``"!words"`` words it must not) are
    checked when set, and ``evidence`` (words the first diagnosis's evidence must hold).
    ``attach`` starts the job with plain ``python`` and watches it with ``dlwatch attach
    --pid`` instead of ``dlwatch run`` (no inside view). ``memory_limit`` (bytes) runs the job in
    a memory cgroup (v1) of its own with that limit (root; skipped where none can be made).
    ``also`` are kinds the judged report must hold among its other findings. ``or_hang``: a
    ``crash`` scenario whose job may, by a race of its own, hang instead; a hang report then
    counts, judged like the crash report.
    """

    name: str
    expected: Optional[str]
    severity: str
    job: Tuple[str, ...] = ()
    settings: Tuple[Tuple[str, object], ...] = ()
    shm_size: Optional[str] = None
    memory_limit: Optional[int] = None
    skip: Optional[str] = None
    timeout_s: float = 120.0
    module: str = module_name("train")
    certainty: Optional[str] = None
    location: Optional[str] = None
    needs_cuda: bool = False
    stall_timeout_s: float = 5.0
    remedy: Tuple[str, ...] = ()
    needs_mount: bool = False
    evidence: Tuple[str, ...] = ()
    attach: bool = False
    also: Tuple[str, ...] = ()
    or_hang: bool = False


def from_case(case) -> "Scenario":
    """The scenario that runs a :class:`probes.cases.Case` target under the watchdog."""
    severity = case.mode or "none"
    return Scenario(
        case.name,
        case.kind,
        severity,
        job=case.args,
        settings=case.settings,
        timeout_s=case.timeout_s,
        module=case.module,
        certainty=case.certainty,
        location=case.location,
        stall_timeout_s=case.stall_timeout_s,
        remedy=case.remedy,
        needs_mount=case.needs_mount,
        evidence=case.evidence,
        attach=case.attach,
        memory_limit=case.memory_limit,
        shm_size=case.shm_size,
        also=case.also,
    )


SCENARIOS: Tuple[Scenario, ...] = (
    Scenario("fork_inherited_lock", "fork_inherited_lock", "hang", ("--fault", "fork-lock")),
    Scenario("fork_inherited_lock_native", "fork_inherited_lock", "hang", ("--fault", "fork-native-lock")),
    Scenario("worker_stuck", "worker_stuck", "hang", ("--fault", "worker-sleep")),
    Scenario("worker_stuck_busy", "worker_stuck", "hang", ("--fault", "worker-spin"), (("busy_stall_timeout_s", 6.0),)),
    Scenario(
        "worker_blocked_io",
        "worker_blocked_io",
        "hang",
        ("--fault", "worker-fifo"),
        evidence=("it is opening", "stuck.fifo (a FIFO"),
        remedy=("stuck.fifo for reading",),
    ),
    Scenario("batch_lost", "batch_lost", "hang", ("--fault", "unpicklable-batch")),
    Scenario(
        "stall_outside_loader",
        "stall_outside_loader",
        "hang",
        ("--fault", "sleep-outside-loader"),
        (("terminate_outside_loader", True),),
    ),
    Scenario(
        "stall_outside_loader_collective",
        "stall_outside_loader",
        "hang",
        ("--fault", "collective-wait", "--samples", "64"),
        (("terminate_outside_loader", True),),
    ),
    Scenario("shutdown_hang", "shutdown_hang", "hang", skip="no known CPU reproduction; fixture test"),
    Scenario(
        "pin_memory_stall", "pin_memory_stall", "hang", module=module_name("gpu.pin_memory_stall"), needs_cuda=True
    ),
    Scenario("worker_killed", "worker_killed", "crash", ("--fault", "worker-killed")),
    Scenario(
        "shm_exhausted",
        "shm_exhausted",
        "crash",
        ("--sample-kib", "512", "--batch-size", "8", "--samples", "64"),
        shm_size="8m",
        # Mostly a crash: a batch's stacked samples do not fit, default_collate raises in the
        # worker and main re-raises. About one run in 15 the samples fit and the labels do not:
        # default_collate makes them with torch.tensor (not shared), the worker's queue feeder
        # thread moves them to /dev/shm while pickling, fails, drops the batch
        # (multiprocessing.queues.Queue._feed), and main waits for it forever: a hang, same cause.
        or_hang=True,
    ),
    Scenario(
        "fd_exhausted",
        "fd_exhausted",
        "crash",
        ("--nofile", "64", "--keep-batches", "100", "--samples", "2000", "--batch-size", "4"),
    ),
    Scenario(
        "worker_start_failed",
        "worker_start_failed",
        "crash",
        ("--fault", "unpicklable-dataset", "--multiprocessing-context", "spawn"),
    ),
    Scenario(
        "cuda_in_forked_worker",
        "cuda_in_forked_worker",
        "crash",
        module=module_name("gpu.cuda_in_forked_worker"),
        needs_cuda=True,
    ),
    Scenario(
        "pin_memory_healthy", None, "none", ("--pin-memory", "--epochs", "3", "--samples", "512"), needs_cuda=True
    ),
    Scenario(
        "fork_inherited_lock_pin_memory",
        "fork_inherited_lock",
        "hang",
        ("--fault", "fork-lock", "--pin-memory"),
        needs_cuda=True,
        certainty="proven",
    ),
    Scenario(
        # main keeps its last 60 pinned batches of 32 MiB: the caching host allocator grows by about 100 MiB/s
        "pinned_memory_growth",
        "pinned_memory_growth",
        "warning",
        (
            "--pin-memory",
            "--keep-batches",
            "60",
            "--sample-kib",
            "1024",
            "--batch-size",
            "32",
            "--samples",
            "2400",
            "--sample-delay-s",
            "0.02",
            "--epochs",
            "1",
        ),
        (("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
        needs_cuda=True,
    ),
    Scenario(
        "worker_memory_growth",
        "worker_memory_growth",
        "warning",
        (
            "--cow-mib",
            "600",
            "--samples",
            "400",
            "--batch-size",
            "4",
            "--sample-delay-s",
            "0.06",
            "--epochs",
            "1",
            "--persistent-workers",
        ),
        (("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
    ),
    Scenario(
        "fd_pressure",
        "fd_pressure",
        "warning",
        (
            "--nofile",
            "256",
            "--keep-batches",
            "100",
            "--samples",
            "1200",
            "--batch-size",
            "4",
            "--sample-delay-s",
            "0.01",
            "--epochs",
            "1",
        ),
        (("warning_interval_s", 1.0),),
    ),
    Scenario(
        "shm_pressure",
        "shm_pressure",
        "warning",
        ("--fill-shm-frac", "0.9", "--samples", "400", "--sample-delay-s", "0.02", "--epochs", "1"),
        (("warning_interval_s", 1.0),),
        shm_size="32m",
    ),
    Scenario(
        "cpu_affinity_narrowed",
        "cpu_affinity_narrowed",
        "warning",
        ("--pin-cpu", "0", "--samples", "400", "--sample-delay-s", "0.03", "--epochs", "1"),
        (("warning_interval_s", 1.0),),
    ),
    Scenario(
        "cpu_oversubscribed",
        "cpu_oversubscribed",
        "warning",
        (
            "--num-workers",
            "4",
            "--worker-threads",
            "4",
            "--cpu-ms",
            "40",
            "--samples",
            "600",
            "--epochs",
            "1",
            "--persistent-workers",
        ),
        (("warning_interval_s", 2.0),),
    ),
)
# The kinds a case reproduces in the catalogue: probes.cases marks each (Case.repro_as).
SCENARIOS = (
    SCENARIOS
    + tuple(
        Scenario(**{**from_case(cases.BY_NAME[target]).__dict__, "name": kind})
        for kind, target in cases.REPRO_AS.items()
    )
    + (
        Scenario(
            "main_memory_growth",
            "main_memory_growth",
            "warning",
            settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
            module=module_name("cases.main_keeps_graphs_oom"),
            memory_limit=1 << 30,
            timeout_s=120.0,
        ),
        Scenario(
            "map_count_pressure",
            "map_count_pressure",
            "warning",
            settings=(("memory_read_base_interval_s", 2.0), ("warning_interval_s", 2.0)),
            module=module_name("cases.map_count_exhausted"),
            timeout_s=170.0,
        ),
    )
)
BY_NAME = {s.name: s for s in SCENARIOS}
CASE_SCENARIOS = {c.name: from_case(c) for c in cases.CASES}


@dataclass
class Outcome:
    """What one scenario produced. ``status`` is ``ok``, ``misdiagnosed`` or ``skipped``."""

    scenario: Scenario
    status: str
    first: Optional[str] = None
    kinds: Tuple[str, ...] = ()
    latency_s: Optional[float] = None
    report: Optional[str] = None
    exit_code: Optional[int] = None
    note: str = ""
    fix: str = ""  # with --verify: holds, does not hold, no fix (the kind declares none), or why not run


# Seconds a `dlwatch verify` of one scenario's report may take (its default runs, three of each
# variant, bounded, and their reports).
VERIFY_TIMEOUT_S = 1500.0


def verify_report(report: str, workdir: str, timeout_s: float = VERIFY_TIMEOUT_S) -> Tuple[str, str]:
    """Run ``dlwatch verify`` on a scenario's ``report`` folder (its JSON into ``workdir``):
    ``(result, verdict line)``, the result ``holds``, ``does not hold``, ``no fix`` (the
    report declares no mechanical fix: nothing is run) or ``failed`` (verify gave no verdict).
    Every process it starts is killed at the end, whatever happens."""
    with open(os.path.join(report, "report.json"), encoding="utf-8") as f:
        if not json.load(f)["diagnoses"][0].get("remedy_apply"):
            return "no fix", ""
    out = os.path.join(workdir, "verify.json")
    proc = subprocess.Popen(
        python("-m", "watchdog", "verify", report, "--json", out),
        env=child_env(),
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "failed", f"no verdict within {timeout_s:g} s"
    finally:
        kill_session(proc)
    try:
        with open(out, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return "failed", (err.strip().splitlines() or ["no verdict"])[-1]
    return ("holds" if doc.get("holds") else "does not hold"), str(doc.get("verdict", ""))


def cuda_available() -> bool:
    """Whether the torch that the scenarios run with sees a CUDA device (asked in a subprocess,
    so this process never initialises CUDA)."""
    done = subprocess.run(
        python("-c", "import torch; print(torch.cuda.is_available())", isolated=True),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout.strip() == "True"


def memory_cgroup_folder(name: str) -> Tuple[Optional[str], Optional[str]]:
    """``(folder, None)``: a new cgroup v1 memory folder for scenario ``name`` below this
    process's own, made and removed again to prove it can be; or ``(None, why not)``."""
    from watchdog.collect import cgroup

    own = cgroup.memory_cgroup(os.getpid())
    if own is None or own.version != 1:
        return None, "no cgroup v1 memory controller to make a limited cgroup in (cgroup v2 needs delegation)"
    folder = os.path.join(own.path, f"dlwatch-case-{name}-{os.getpid()}")
    try:
        os.mkdir(folder)
        os.rmdir(folder)
    except OSError as e:
        return None, f"cannot make a memory cgroup (needs root): {e.strerror}"
    return folder, None


def _remove_cgroup(folder: str) -> None:
    """Remove a scenario's memory cgroup once its processes are gone (a few tries)."""
    for _ in range(20):
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.25)


def can_private_shm() -> Optional[str]:
    """``None`` when a private /dev/shm can be mounted here, else why not."""
    if shutil.which("unshare") is None:
        return "unshare(1) not found"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True, text=True
    )
    return (
        None
        if done.returncode == 0
        else f"cannot mount a private /dev/shm (needs root or CAP_SYS_ADMIN): {done.stderr.strip()[:80]}"
    )


def _config_file(folder: str, settings) -> Optional[str]:
    if not settings:
        return None
    import yaml

    path = os.path.join(folder, "config.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(dict(settings), f)
    return path


def command(s: Scenario, report_dir: str, config: Optional[str], memcg: Optional[str] = None) -> List[str]:
    """The full command line that runs scenario ``s`` under the watchdog: ``dlwatch run -- JOB``,
    or for ``s.attach`` a shell that starts the job in the background and becomes ``dlwatch
    attach --pid`` of it (the job stays dlwatch's child, so that the run's process tree holds
    it)."""
    flags = [
        "--report-dir",
        report_dir,
        "--interval",
        "1",
        "--stall-timeout",
        f"{s.stall_timeout_s:g}",
        "--on-hang",
        "terminate",
        "--terminate-grace",
        "2",
    ]
    if config:
        flags += ["--config", config]
    if s.attach:
        py = " ".join(shlex.quote(f) for f in python()[1:])  # the interpreter's flags
        script = f'python="$1"; shift; "$python" {py} -m "$@" & exec "$python" {py} -m watchdog attach --pid "$!" '
        script += " ".join(shlex.quote(f) for f in flags)
        return ["sh", "-c", script, "sh", sys.executable, s.module, *s.job]
    cmd = python("-m", "watchdog", "run", *flags, "--")
    if s.shm_size:
        cmd += ["unshare", "-m", "sh", "-c", SHM_WRAPPER.format(size=s.shm_size), "sh"]
    if memcg and s.memory_limit:
        cmd += ["sh", "-c", MEMCG_WRAPPER.format(limit=int(s.memory_limit)), "sh", memcg]
    return cmd + python("-m", s.module, *s.job)


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``, every descendant and every process group among them (``dlwatch run``
    puts the job in a group of its own), then reap ``proc`` (:func:`watchdog.children.end_tree`)."""
    from watchdog.children import end_tree

    end_tree(proc, grace_s=0.0, reap_s=10.0)


def _stamp(stdout: str, marker: str) -> Optional[float]:
    for line in stdout.splitlines():
        if marker in line and " t=" in line:
            return float(line.rsplit("t=", 1)[1])
    return None


def _documents(report_dir: str) -> List[Tuple[str, dict]]:
    out = []
    for name in sorted(os.listdir(report_dir)) if os.path.isdir(report_dir) else []:
        path = os.path.join(report_dir, name, "report.json")
        if name.startswith(".") or not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            out.append((os.path.join(report_dir, name), json.load(f)))
    return out


def _conclusive(s: Scenario, docs: List[Tuple[str, dict]]) -> bool:
    """True once the reports settle the scenario and the job may be ended: a hang report (a
    suspected hang is not terminated), or the expected warning."""
    if s.severity == "hang":
        return any(d["mode"] == "hang" for _, d in docs)
    if s.severity == "warning":
        return any(x["kind"] == s.expected for _, d in docs for x in d["diagnoses"])
    return False


# Warning kinds that are performance advice, not alarms: a healthy control may get them (a toy
# job that sleeps in its Dataset is input-bound), except one run as "quiet".
ADVICE_KINDS = frozenset({"input_bound"})


def _advice_only(doc: dict) -> bool:
    """Whether a report is a live warning holding advice only (:data:`ADVICE_KINDS`)."""
    return doc.get("mode") == "live" and all(x["kind"] in ADVICE_KINDS for x in doc.get("diagnoses", ()))


def _judge(
    s: Scenario, docs: List[Tuple[str, dict]], exit_code: Optional[int]
) -> Tuple[bool, Optional[Tuple[str, dict]], Tuple[str, ...], str]:
    """``(ok, the report judged, kinds seen, why not)``."""
    if s.severity in ("none", "unharmed", "quiet"):
        if s.severity == "none":  # performance advice on a healthy job is no false alarm
            docs = [(p, d) for p, d in docs if not _advice_only(d)]
        kinds = tuple(d["diagnoses"][0]["kind"] for _, d in docs)
        harmed = [
            d for _, d in docs if d["action"] == "terminate" or (d.get("stall") or {}).get("certainty") == "proven"
        ]
        ok = exit_code == 0 and (not docs if s.severity in ("none", "quiet") else not harmed)
        return (
            ok,
            (docs[0] if docs else None),
            kinds,
            "" if ok else f"a healthy job got reports {', '.join(kinds) or '(none)'}, exit {exit_code}",
        )
    if s.severity == "warning":
        chosen = next(
            ((p, d) for p, d in docs if any(x["kind"] == s.expected for x in d["diagnoses"])), docs[0] if docs else None
        )
        kinds = tuple(x["kind"] for _, d in docs for x in d["diagnoses"])
        hits = [x for x in (chosen[1]["diagnoses"] if chosen else ()) if x["kind"] == s.expected]
        why = [] if hits else [f"no {s.expected} warning"]
        if hits:
            said = "\n".join([hits[0].get("summary", "")] + list(hits[0].get("evidence", ())))
            why += [f"{s.expected} lacks {w!r}" for w in s.evidence if w not in said]
            for words in s.remedy:
                absent = words.startswith("!")
                if (words.lstrip("!") in hits[0].get("remedy", "")) == absent:
                    why.append(f"remedy {'holds' if absent else 'lacks'} {words.lstrip('!')!r}")
        return not why, chosen, kinds, "; ".join(why)
    wanted = {"hang": ("hang",), "crash": ("crash",), "exit": ("crash", "exit")}[s.severity]
    wanted += ("hang",) if s.or_hang else ()
    main_docs = [(p, d) for p, d in docs if d["mode"] in wanted]
    chosen = main_docs[0] if main_docs else None
    kinds = tuple(x["kind"] for _, d in main_docs[:1] for x in d["diagnoses"])
    if chosen is None:
        other = ", ".join(f"{d['mode']} {d['diagnoses'][0]['kind']}" for _, d in docs)
        return False, None, kinds, f"no {' or '.join(wanted)} report" + (f" (only: {other})" if other else "")
    first = chosen[1]["diagnoses"][0]
    why = []
    if first["kind"] != s.expected:
        why.append(f"first diagnosis {first['kind']}")
    if s.certainty and (chosen[1].get("stall") or {}).get("certainty") != s.certainty:
        why.append(f"certainty {(chosen[1].get('stall') or {}).get('certainty')}, expected {s.certainty}")
    if s.location:
        loc = first.get("location") or ""
        file, _, line = loc.rpartition(":")
        try:
            with open(file, encoding="utf-8") as f:
                text = f.read().splitlines()[int(line) - 1]
        except (OSError, ValueError, IndexError):
            text = ""
        if s.location not in text:
            why.append(f"location {loc or 'none'} is not the line with {s.location!r}")
    for words in s.remedy:
        absent = words.startswith("!")
        if (words.lstrip("!") in first.get("remedy", "")) == absent:
            why.append(f"remedy {'holds' if absent else 'lacks'} {words.lstrip('!')!r}")
    evidence = "\n".join(first.get("evidence", ()))
    why += [f"evidence lacks {words!r}" for words in s.evidence if words not in evidence]
    found = {x["kind"] for x in chosen[1]["diagnoses"]}
    why += [f"no {kind} among the findings" for kind in s.also if kind not in found]
    return not why, chosen, kinds, "; ".join(why)


STOP_GRACE_S = 15.0  # after SIGTERM, how long dlwatch gets to end the job and clean up
_PUMP = "watchdog.collect.stderr_tail"  # dlwatch's stderr pump: it removes its folder at EOF


class _Tree:
    """Every process seen below ``proc`` (a ``dlwatch run``) while a scenario runs, so that
    what outlives dlwatch (a worker that ignored SIGTERM, an orphan) can still be found."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.seen: dict = {}

    def note(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            found = [root] + root.children(recursive=True)
        except psutil.Error:
            return
        for p in found:
            self.seen.setdefault(p.pid, p)

    def alive(self) -> list:
        """The processes seen that still run (psutil compares creation times: a reused pid is
        not taken for one seen)."""
        return [p for p in self.seen.values() if p.is_running()]


def _is_pump(p) -> bool:
    import psutil

    try:
        return _PUMP in " ".join(p.cmdline())
    except psutil.Error:
        return False


def stop_run(proc: subprocess.Popen, tree: _Tree, grace_s: float = STOP_GRACE_S) -> None:
    """End a ``dlwatch run`` (``proc``) and everything it started, leaving nothing behind.

    A running dlwatch gets SIGTERM, which it forwards to the job; it then writes what it owes,
    removes its temporary folders (``/tmp/dlwatch-stderr-*``, the inside view's) and exits;
    it has ``grace_s`` seconds. Then every process of ``tree`` still running is killed
    (SIGKILL), dlwatch's stderr pump last: once the job's processes are gone its pipe ends and
    it removes its own folder, as it does when dlwatch is gone. Raises nothing."""
    import psutil

    tree.note()
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
    left = [p for p in tree.alive() if p.pid != proc.pid]
    pumps = [p for p in left if _is_pump(p)]
    for p in left:
        if p not in pumps:
            try:
                p.kill()
            except psutil.Error:
                pass
    psutil.wait_procs(pumps, timeout=3.0)
    kill_session(proc)  # dlwatch itself if it outlived the grace, its group, and the pumps that did not end
    for p in pumps:
        try:
            p.kill()
        except psutil.Error:
            pass


def run_scenario(s: Scenario, workdir: str) -> Outcome:
    """Run one scenario in ``workdir`` (made absolute: its reports go to ``workdir/reports``,
    and the job runs there): start it under the watchdog, end it once the reports settle it (a
    suspected hang is reported, not terminated) or it ends by itself, and judge the reports
    that had been written by then. Always ends every process it started (:func:`stop_run`)."""
    if s.skip:
        return Outcome(s, "skipped", note=s.skip)
    if s.needs_cuda and not cuda_available():
        return Outcome(s, "skipped", note=f"needs CUDA (python -m {s.module}); fixture test")
    if s.shm_size or s.needs_mount:
        why = can_private_shm()
        if why:
            return Outcome(s, "skipped", note=why)
    memcg = None
    if s.memory_limit:
        memcg, why = memory_cgroup_folder(s.name)
        if memcg is None:
            return Outcome(s, "skipped", note=why or "")
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    report_dir = os.path.join(workdir, "reports")
    cmd = command(s, report_dir, _config_file(workdir, s.settings), memcg)
    started = time.time()
    out_path = os.path.join(workdir, "job.stdout")
    err_path = os.path.join(workdir, "dlwatch.stderr")
    with open(out_path, "w", encoding="utf-8") as out_file, open(err_path, "w", encoding="utf-8") as err_file:
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=child_env(),
            stdout=out_file,
            stderr=err_file,
            text=True,
            start_new_session=True,
        )
        tree = _Tree(proc)
        docs: Optional[List[Tuple[str, dict]]] = None
        try:
            deadline = time.monotonic() + s.timeout_s
            while proc.poll() is None and time.monotonic() < deadline:
                tree.note()
                found = _documents(report_dir)
                if _conclusive(s, found):
                    docs = found  # judged as they were when they settled it: not what ending the job adds
                    break
                time.sleep(0.25)
            exit_code = proc.poll()
            if exit_code is None and docs is None:  # the deadline: a last look
                found = _documents(report_dir)
                docs = found if _conclusive(s, found) else None
            timed_out = exit_code is None and docs is None
        finally:
            stop_run(proc, tree)
            _remove_leftovers(report_dir)
            if memcg:
                _remove_cgroup(memcg)
    if timed_out:
        return Outcome(
            s, "misdiagnosed", note=f"no conclusion within {s.timeout_s:g} s{_said(err_path)}", exit_code=None
        )
    with open(out_path, encoding="utf-8", errors="replace") as f:
        out = f.read()
    if docs is None:
        docs = _documents(report_dir)
    ok, chosen, kinds, why = _judge(s, docs, exit_code)
    latency = None
    if chosen is not None:
        detected = dt.datetime.fromisoformat(chosen[1]["detected_at"].replace("Z", "+00:00")).timestamp()
        latency = detected - (_stamp(out, "fault ") or started)
    return Outcome(
        s,
        "ok" if ok else "misdiagnosed",
        first=chosen[1]["diagnoses"][0]["kind"] if chosen else None,
        kinds=kinds,
        latency_s=latency,
        report=chosen[0] if chosen else None,
        exit_code=exit_code,
        note="" if ok else failure_note(why, docs, kinds, exit_code, err_path),
    )


def failure_note(
    why: str, docs: List[Tuple[str, dict]], kinds: Tuple[str, ...], exit_code: Optional[int], err_path: str
) -> str:
    """Why a scenario came out MISDIAGNOSED, reason first: ``no report written: the job exited
    1 before any (it said: …)`` when dlwatch wrote none, else what :func:`_judge` found wrong
    (``first diagnosis X``, ``no crash report``, …); then dlwatch's exit code, the kinds of
    the reports and dlwatch's last lines (:func:`_said`)."""
    if not docs:
        said = _job_said(err_path)
        if exit_code is None:
            reason = "no report written before the scenario was ended"
        else:
            reason = f"no report written: the job exited {exit_code} before dlwatch wrote any"
        reason += f" (the job's last line: {said})" if said else ""
        if why and not why.startswith("no "):
            reason += f"; {why}"
    else:
        reason = why or "the reports do not match the scenario"
    return f"{reason}; dlwatch exited {exit_code}; reports: {', '.join(kinds) or 'none'}{_said(err_path)}"


def _job_said(err_path: str) -> str:
    """The last line of a run's stderr that is not dlwatch's own (the job's: a traceback's last
    line, e.g. ``ModuleNotFoundError: No module named …``), cut to 200 characters; empty
    when none."""
    try:
        with open(err_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip() and not line.startswith("dlwatch:")]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _said(err_path: str, lines: int = 6) -> str:
    """The last ``dlwatch:`` lines of a run's stderr (the job's own lines left out), for the note
    of a scenario that went wrong: what dlwatch did, and where it wrote."""
    try:
        with open(err_path, encoding="utf-8", errors="replace") as f:
            said = [line.rstrip() for line in f if line.startswith("dlwatch:")]
    except OSError:
        return ""
    return "; dlwatch said: " + " | ".join(said[-lines:]) if said else ""


def _remove_leftovers(report_dir: str) -> None:
    """Remove the /dev/shm files the scenario's job may have left: those of every pid its
    reports name (``shm_leaked`` lists them; the process tables and timeline hold the rest)."""
    pids: set = set()
    for _, doc in _documents(report_dir):
        pids.update(p for d in doc["diagnoses"] for p in d["pids"])
        pids.update(p["pid"] for p in doc.get("processes", ()))
        pids.update(p["pid"] for s in doc.get("timeline", ()) for p in s["processes"])
    prefixes = tuple(f"torch_{pid}_" for pid in pids)
    try:
        names = os.listdir("/dev/shm") if prefixes else []
    except OSError:
        names = []
    for name in names:
        if name.startswith(prefixes):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def table(outcomes: List[Outcome], verified: bool = False) -> str:
    """The results as a terminal table; ``verified`` adds whether each report's fix held."""
    rows = [
        [
            o.scenario.name,
            o.scenario.expected,
            o.first or "-",
            o.status.upper() if o.status == "misdiagnosed" else o.status,
            "-" if o.latency_s is None else f"{o.latency_s:.1f}",
        ]
        + ([o.fix.upper() if o.fix in ("does not hold", "failed") else o.fix or "-"] if verified else [])
        + [_last_column(o)]
        for o in outcomes
    ]
    headers = ["scenario", "expected", "first diagnosis", "result", "latency s"]
    return tabulate(rows, headers=headers + (["fix (verify)"] if verified else []) + ["report / note"])


def _last_column(o: Outcome) -> str:
    """A scenario's report, or why it went wrong: a MISDIAGNOSED row always says why (its note),
    then its report's folder when one was judged."""
    if o.status == "misdiagnosed":
        return (o.note or "no reason recorded") + (f"; report: {o.report}" if o.report else "")
    return o.report or o.note


def reasons(outcomes: List[Outcome]) -> List[str]:
    """One line per MISDIAGNOSED scenario, after the table (which a narrow terminal may cut):
    ``MISDIAGNOSED NAME: expected X, first diagnosis Y: WHY``."""
    return [
        f"MISDIAGNOSED {o.scenario.name}: expected {o.scenario.expected or '(no report)'}, first diagnosis "
        f"{o.first or 'none'}: {o.note or 'no reason recorded'}"
        for o in outcomes
        if o.status == "misdiagnosed"
    ]


def listing() -> str:
    """Every scenario and case name with the kind it must get, as a terminal table."""
    known = {**CASE_SCENARIOS, **BY_NAME}
    rows = [
        [
            name,
            s.expected or "(healthy: no report)",
            s.severity,
            s.skip or ("needs CUDA" if s.needs_cuda else ("needs a private /dev/shm" if s.shm_size else "")),
        ]
        for name, s in known.items()
    ]
    return tabulate(rows, headers=["name", "expected", "severity", "needs"])


# Seconds one scenario takes on a 2-core VM (2026-12-05: worker_stuck 15.0 s, lock_order_in_worker
# 14.4 s; a healthy control runs its whole job, a crash ends sooner), and a --verify of one
# (two more runs of the job, the control and the fix).
SCENARIO_S, VERIFY_S = 20.0, 40.0


def estimate_s(scenarios: int, verify: bool) -> float:
    """About how many seconds ``scenarios`` scenarios take on a 2-core machine, with ``verify``
    each one's re-runs (an upper bound: only a report whose kind has a mechanical fix is verified)."""
    return scenarios * (SCENARIO_S + (VERIFY_S if verify else 0.0))


def main(argv: Optional[List[str]] = None) -> int:
    """``dlwatch probe repro NAME…|--all|--cases|--list``: see the module docstring for what
    it runs, where the reports go and the exit codes."""
    p = Parser(
        prog="dlwatch probe repro",
        description="Reproduce known DataLoader failures under the watchdog and check each diagnosis.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="scenario or case names (`--list` shows them)")
    p.add_argument("--all", action="store_true", help="run every scenario of the catalogue")
    p.add_argument(
        "--cases",
        action="store_true",
        help="run every case modelled on a public bug report, healthy controls included (probes/cases)",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="print every scenario and case name with the diagnosis it must get, and run nothing",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="then run `dlwatch verify` on each report whose kind declares a mechanical fix, and say whether it "
        "holds (re-runs each such job twice more)",
    )
    p.add_argument(
        "--report-dir",
        type=folder,
        metavar="DIR",
        help="where each scenario's folder goes (default: dlwatch-reports/repro-<UTC time> in the working directory)",
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        print(listing())
        return Exit.OK
    known = {**CASE_SCENARIOS, **BY_NAME}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        p.error(f"unknown scenario {unknown[0]!r} (`dlwatch probe repro --list` shows them)")
    if not args.names and not args.all and not args.cases:
        p.error("name a scenario, or --all, or --cases (or --list)")
    chosen = (
        (list(SCENARIOS) if args.all else [])
        + (list(CASE_SCENARIOS.values()) if args.cases else [])
        + [known[n] for n in args.names]
    )
    base = os.path.abspath(
        args.report_dir
        or os.path.join("dlwatch-reports", "repro-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    )
    try:
        os.makedirs(base, exist_ok=True)
    except OSError as e:
        p.error(f"--report-dir {base}: cannot create it: {e.strerror}")
    if len(chosen) > 1 or args.verify:
        say_estimate(
            "repro",
            estimate_s(len(chosen), args.verify),
            f"{len(chosen)} scenario(s), about {SCENARIO_S:g} s each"
            + (", and --verify's re-runs" if args.verify else ""),
        )
    outcomes = []
    for i, s in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {s.name} …", file=sys.stderr, flush=True)
        outcome = run_scenario(s, os.path.join(base, s.name))
        if args.verify and outcome.status == "ok" and outcome.report:
            result, line = verify_report(outcome.report, os.path.join(base, s.name))
            print(f"  verify: {result}{': ' + line if line else ''}", file=sys.stderr, flush=True)
            outcome = dataclasses.replace(outcome, fix=result)
        outcomes.append(outcome)
    print(table(outcomes, verified=args.verify))
    for line in reasons(outcomes):
        print(line)
    failed = any(o.status == "misdiagnosed" or o.fix in ("does not hold", "failed") for o in outcomes)
    return Exit.FAILED if failed else Exit.OK


if __name__ == "__main__":
    sys.exit(main())
