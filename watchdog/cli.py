"""``dlwatch``: the command line. The only module that prints to the user and exits.

Exit codes: the members of :class:`watchdog.exits.Exit` (README "Exit codes" describes each
command's); ``run`` also passes on the job's own code, and ``attach`` 128 + N after signal N.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from types import ModuleType
from typing import Dict, List, Optional, Tuple

import psutil

from . import __version__, redact
from . import config as config_mod
from .argtypes import UsageParser, folder, positive_float, positive_int
from .collect import discovery, inside, procfs
from .collect.launch import context as launch_context
from .collect.stderr_tail import StderrTail
from .commands import cluster as cluster_mod
from .commands import verify as verify_mod
from .errors import ConfigError, ReportWriteError, TargetError, WatchdogError
from .exits import Exit, of_signal
from .report import document as report
from .report import writer
from .types import Launch, ReportWritten
from .watch.node_loop import JobWatcher
from .watch.terminal import JobControl, wait_job
from .watch.wake import Waker
from .watch.watcher import Outcome, log

# Command-line flags that override settings: flag -> (dotted key, argparse type).
_OVERRIDES = {
    "--interval": ("interval_s", float),
    "--stall-timeout": ("stall_timeout_s", float),
    "--on-hang": ("on_hang", str),
    "--terminate-unproven-after": ("terminate_unproven_after_s", float),
    "--terminate-grace": ("terminate_grace_s", float),
    "--report-dir": ("report_dir", str),
    "--pyspy-timeout": ("py_spy.timeout_s", float),
    "--metrics-port": ("metrics_port", int),
    "--metrics-addr": ("metrics_addr", str),
    "--node": ("node", str),
}
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Seconds to wait for the job's stderr to close after it exits (orphans may hold it open).
_STDERR_DRAIN_S = 2.0
# The bytes of a script's first line the kernel reads for its `#!` (BINPRM_BUF_SIZE).
_SHEBANG_BYTES = 256


# Where a flag means something else under `attach` than the setting's own description says.
_ATTACH_HELP = {
    "--no-hook": "do not read the job's inside view even when its environment names one (a job started "
    "with `env $(dlwatch hook-env) …`): watch from outside only",
    "--terminate-grace": "seconds between SIGTERM and SIGKILL to the job's processes (its process tree; "
    "terminate_grace_s; >= 0, <= 600)",
}


def _add_common(p: argparse.ArgumentParser, attach: bool = False) -> None:
    def h(key: str, negated: bool = False, flag: str = "") -> str:
        # each setting's description is in watchdog/config.py, the one place
        return _ATTACH_HELP[flag] if attach and flag in _ATTACH_HELP else config_mod.flag_help(key, negated=negated)

    p.add_argument("--no-hook", action="store_true", help=h("hook", negated=True, flag="--no-hook"))
    p.add_argument(
        "--config", metavar="PATH", help="YAML settings file (see config.yaml for every key); flags override it"
    )
    p.add_argument("--report-dir", type=folder, metavar="DIR", help=h("report_dir"))
    p.add_argument("--interval", type=float, metavar="S", help=h("interval_s"))
    p.add_argument("--stall-timeout", type=float, metavar="S", help=h("stall_timeout_s"))
    p.add_argument("--on-hang", choices=("report", "terminate"), help=h("on_hang"))
    p.add_argument("--terminate-unproven-after", type=positive_float, metavar="S", help=h("terminate_unproven_after_s"))
    p.add_argument("--terminate-grace", type=float, metavar="S", help=h("terminate_grace_s", flag="--terminate-grace"))
    p.add_argument("--pyspy-timeout", type=float, metavar="S", help=h("py_spy.timeout_s"))
    p.add_argument("--no-native", action="store_true", help=h("py_spy.native", negated=True))
    p.add_argument("--metrics-port", type=int, metavar="PORT", help=h("metrics_port"))
    p.add_argument("--metrics-addr", metavar="ADDR", help=h("metrics_addr"))
    p.add_argument("--node", metavar="NAME", help=h("node"))


def build_parser() -> argparse.ArgumentParser:
    """The ``dlwatch`` argument parser."""
    parser = UsageParser(
        prog="dlwatch", description="Watch a PyTorch training job; explain why its DataLoader stopped moving."
    )
    parser.add_argument("--version", action="version", version=f"dlwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=UsageParser)
    run = sub.add_parser("run", help="start a job and watch it: dlwatch run [options] -- CMD ARGS…")
    _add_common(run)
    run.add_argument(
        "--stop-after-batches",
        type=positive_int,
        metavar="K",
        help="end the job (SIGTERM, then SIGKILL after terminate_grace_s) once main's DataLoaders delivered K "
        "batches, or once a hang is reported; exit code 0 (124 for a hang): a bounded run, as `dlwatch verify` starts",
    )
    run.add_argument(
        "--stop-after-s", type=positive_float, metavar="S", help="the same, after S seconds (and on a hang report)"
    )
    run.add_argument(
        "--summary-json",
        metavar="PATH",
        help="at the end, write the run's figures (exit code, why it was ended, batches, samples/s, first batch "
        "latency, the loader settings seen, reports) to PATH as JSON",
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="the job's command, after --")
    attach = sub.add_parser("attach", help="watch a running job: dlwatch attach --pid PID [options]")
    attach.add_argument("--pid", type=int, required=True, help="the job's main process")
    _add_common(attach, attach=True)
    reports_p = sub.add_parser("reports", help="list report folders, newest first: dlwatch reports [DIR]")
    reports_p.add_argument(
        "dir", nargs="?", default=None, help="the report folder (default: report_dir, dlwatch-reports)"
    )
    reports_p.add_argument(
        "--report-dir", dest="report_dir", metavar="DIR", default=None, help="the report folder, as DIR"
    )
    reports_p.add_argument("--config", metavar="PATH", help="YAML settings file, for report_dir")
    reports_p.add_argument("-n", type=positive_int, default=None, metavar="N", help="only the newest N")
    show = sub.add_parser("show", help="print a report again: dlwatch show REPORT [--full] [--html [--out PATH]]")
    show.add_argument("report", help="a report folder, or a file in it (the report.txt path dlwatch prints)")
    show.add_argument(
        "--full",
        action="store_true",
        help="the whole report.txt (evidence, processes, stacks); default: the short summary",
    )
    show.add_argument("--html", action="store_true", help="write one self-contained HTML page and print its path")
    show.add_argument("--out", metavar="PATH", help="where --html writes (default REPORT/report.html)")
    status = sub.add_parser(
        "status",
        help="what a running job's DataLoaders are doing now (its inside view) and its pinned memory: dlwatch status "
        "--pid PID",
        description="Print, for a job started by `dlwatch run` (or with `env $(dlwatch hook-env) …`), each DataLoader "
        "iterator's settings, batches, data wait and what main waits for, and each CUDA process's pinned host memory.",
    )
    status.add_argument("--pid", type=int, required=True, help="the job's main process (or any process of it)")
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.add_argument(
        "--window",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds to watch the job for the input-bound verdict (main's data wait, the workers' time by state; "
        "default 5; 0: no verdict)",
    )
    dump = sub.add_parser(
        "dump",
        help="the stacks of a job's main process and every DataLoader worker now (py-spy): dlwatch dump --pid PID",
        description="Dump, with py-spy, the Python stacks of the job's main process and each of its DataLoader "
        "workers (and a forkserver) in parallel, with each process's role, state and kernel wait; what a hang report "
        "holds, on demand. Exit code 2 when the pid cannot be watched or py-spy is missing.",
    )
    dump.add_argument("--pid", type=int, required=True, help="the job's main process (or any process of it)")
    dump.add_argument("--native", action="store_true", help="native frames too (py-spy --native; slower)")
    dump.add_argument("--locals", action="store_true", help="each frame's local variables (redacted; py-spy --locals)")
    dump.add_argument("--timeout", type=positive_float, default=10.0, metavar="S", help="seconds for all dumps (10)")
    dump.add_argument("--json", action="store_true", help="print JSON instead of text")
    sub.add_parser(
        "hook-env",
        help="print the environment that gives `dlwatch attach` the inside view: env $(dlwatch hook-env) python "
        "train.py",
        description="Print PYTHONPATH=… DLWATCH_HOOK_DIR=… (a new private folder) for a job started by hand; "
        "`dlwatch attach --pid PID` then finds the folder in the job's environment.",
    )
    verify_mod.add_parser(sub)
    cluster_mod.add_parser(sub)
    probes_cli: Optional[ModuleType]
    try:  # the command table (standard library only: no torch while parsing)
        probes_cli = probes_module("cli")
    except ImportError:
        probes_cli = None
    probe = sub.add_parser(
        "probe",
        help="reproductions and benchmarks (need the [probes] extra); `dlwatch probe --help` lists them",
        description=probes_cli.DESCRIPTION if probes_cli else "Reproductions and benchmarks (need the [probes] extra).",
        epilog=probes_cli.EPILOG if probes_cli else None,
    )
    if probes_cli:
        probes_cli.add_commands(probe)  # sets probe_args to [COMMAND, ARGS…]
    else:
        probe.add_argument("probe_args", nargs=argparse.REMAINDER, help="COMMAND and its arguments")
    return parser


def load_config(args: argparse.Namespace) -> config_mod.Config:
    """Settings from ``--config`` and the flags.

    Raises:
        ConfigError: naming the file, line and key of a bad value in the file, or the flag
            (``command line: --interval: …``) of a bad value given on the command line.
    """
    overrides: Dict[str, object] = {}
    flag_of = {}
    for flag, (key, _type) in _OVERRIDES.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            overrides[key] = value
            flag_of[key] = flag
    if args.no_native:
        overrides["py_spy.native"] = False
    if args.no_hook:
        overrides["hook"] = False
    return config_mod.load(args.config, overrides, flag_of)


def _exit_code_of(returncode: int) -> int:
    return of_signal(-returncode) if returncode < 0 else returncode


def _start_stderr_tail(cfg: config_mod.Config, orphan_cleanup=()) -> Optional[StderrTail]:
    """The stderr pass-through with its kept tail, or ``None`` (the job's stderr then is ours,
    untouched): when ``stderr_tail_bytes`` is 0, when our stderr is closed, or when the pump
    cannot start."""
    if not cfg.stderr_tail_bytes:
        return None
    try:
        os.fstat(2)
        return StderrTail(2, cfg.stderr_tail_bytes, orphan_cleanup)
    except OSError as e:
        if e.errno != errno.EBADF:
            log(f"cannot capture the job's stderr ({e.strerror}); crash diagnosis from stderr is off")
        return None


def cmd_run(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    """Start the job in its own process group, watch it, return its exit code (or 124). When
    dlwatch has the terminal, the job gets it while it runs (:mod:`watchdog.watch.terminal`)."""
    cmd: List[str] = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise ConfigError("CMD", "no command given; usage: dlwatch run [options] -- CMD ARGS…", "command line")
    if not cmd[0]:
        log("cannot start '': command not found")
        return Exit.NOT_FOUND
    # Its own process group (setpgid), in our session: terminal signals reach dlwatch, which forwards them.
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    wake, forward_wake, ended = Waker(), Waker(), threading.Event()
    pending: List[int] = []
    received: List[int] = []  # every signal forwarded to the job, in order

    def on_signal(signum, _frame) -> None:
        pending.append(signum)  # handlers only enqueue and write to a self-pipe; a thread forwards
        received.append(signum)
        forward_wake.set()
        wake.set()

    # Before the job exists: a signal from now on is kept and forwarded once it does (no window
    # in which SIGTERM would kill dlwatch and leave the job running unwatched).
    for sig in _FORWARDED:
        signal.signal(sig, on_signal)
    server, collector = _start_metrics(cfg, *_metrics_origin(args))
    folder, reader = _hook_folder(cfg)
    env = inside.hook_env(os.environ, folder.path, os.getpid(), cfg.data_checks) if folder else None
    redact.learn(env if env is not None else os.environ)  # its secret values: hidden wherever they appear later
    tail = _start_stderr_tail(cfg, [folder.path] if folder else [])
    search = (env or os.environ).get("PATH", os.defpath)
    # The first executable of that name on PATH, as bash runs it: Python's own search would go
    # on to a later PATH folder when the first one's #! interpreter is missing (ENOENT), and run
    # another program of the same name. argv[0] stays as the user typed it.
    program = cmd[0] if "/" in cmd[0] else shutil.which(cmd[0], path=search) or cmd[0]
    try:
        proc = subprocess.Popen(cmd, executable=program, stderr=tail.job_stderr if tail else None, env=env, **group)
    except OSError as e:
        why, code = start_failure(cmd[0], e, search)
        log(f"cannot start {cmd[0]!r}: {why}")
        if tail:
            tail.close_job_end()
            tail.wait(_STDERR_DRAIN_S)
            tail.cleanup()
        _remove(folder)
        if server is not None:
            server.shutdown()
        return code
    if tail:
        tail.close_job_end()
    control = JobControl(log)
    control.hand_over(proc.pid)

    def waiter() -> None:
        try:
            proc.returncode = wait_job(proc.pid, control)
        except ChildProcessError:  # never: only this thread reaps the job
            proc.wait()
        control.restore()
        ended.set()
        wake.set()
        forward_wake.set()

    def forwarder() -> None:
        # Its own thread, so a signal reaches the job at once, even while the loop examines a
        # stall (py-spy dumps take seconds).
        while True:
            while pending:
                try:
                    os.killpg(proc.pid, pending.pop(0))
                except OSError:
                    pass
            if ended.is_set():
                return
            forward_wake.wait(0.5)

    threading.Thread(target=waiter, name="job-waiter", daemon=True).start()
    threading.Thread(target=forwarder, name="signal-forwarder", daemon=True).start()
    outcome, watcher = Outcome(), None
    bounded = args.stop_after_batches or args.stop_after_s or args.summary_json
    bound = verify_mod.RunBound(args.stop_after_batches, args.stop_after_s, time.monotonic()) if bounded else None
    try:
        watcher = JobWatcher(
            cfg,
            proc.pid,
            proc.pid,
            ended.is_set,
            wake,
            stderr_tail=tail.text if tail else str,
            job_cmdline=cmd,
            inside=reader,
            launch=Launch(tuple(cmd), os.getcwd(), os.getuid(), "run", *launch_context()),
        )
        _attach_metrics(collector, watcher)
        outcome = watcher.run(_bounded(watcher, bound) if bound else lambda: None)
        if outcome.stopped:
            log(f"the run reached its bound ({outcome.stopped}): ending the job")
            log(watcher.job.end_job())
    except Exception as e:  # the job must outlive the watchdog's own failure
        log(f"internal error, no longer watching: {e!r}")
    ended.wait()
    if tail:
        tail.wait(_STDERR_DRAIN_S)
    code = _exit_code_of(proc.returncode)
    interrupted = {-signal.SIGINT: signal.SIGINT, -signal.SIGQUIT: signal.SIGQUIT}
    interrupted.update({of_signal(signal.SIGINT): signal.SIGINT, of_signal(signal.SIGQUIT): signal.SIGQUIT})
    if control.handed and proc.returncode in interrupted and not received:
        # The terminal's Ctrl-C or Ctrl-\ reached the job straight (it owned the terminal); a job
        # that catches KeyboardInterrupt exits 130 itself.
        received.append(interrupted[proc.returncode])
    if watcher is not None:
        before = len(received)  # a signal from now on cuts the wait for alert commands short
        watcher.after_exit(
            code,
            terminated=outcome.terminated or bool(outcome.stopped),  # its end is dlwatch's doing, no crash
            signalled=received[0] if received else None,
            interrupted=lambda: len(received) > before,
        )
    if tail:
        tail.cleanup()
    _remove(folder)
    if server is not None:
        server.shutdown()
    written = watcher.outcome.reports if watcher is not None else []
    if written or outcome.terminated or outcome.stopped:
        # The last word, after whatever the job printed while it went down.
        what = (
            "ended the hung job (exit 124)"
            if outcome.terminated
            else f"ended the job at its bound ({outcome.stopped}; its exit code {code})"
            if outcome.stopped
            else f"the job exited with code {code}"
        )
        log(
            f"{what}; {len(written)} report(s), the last: {os.path.join(written[-1], 'report.txt')}"
            if written
            else what
        )
    if bound is not None and args.summary_json:
        try:
            writer.write_json(args.summary_json, bound.summary(code, outcome.stopped, written, time.monotonic()))
        except ReportWriteError as e:
            log(f"--summary-json: {e}")
    if outcome.stopped:
        return Exit.TERMINATED if outcome.stopped == "hung" else Exit.OK
    return Exit.TERMINATED if outcome.terminated else code


def _bounded(watcher: JobWatcher, bound: "verify_mod.RunBound"):
    """The ``until`` of a bounded run (:meth:`JobWatcher.run`): counts the batches of the
    job watcher's latest sample and hears of hang reports (chained to ``on_report``)."""
    previous = watcher.on_report

    def on_report(written: ReportWritten) -> None:
        previous(written)
        bound.reported(written)

    watcher.on_report = on_report

    def until() -> Optional[str]:
        bound.note(watcher.job.status().sample)
        return bound.reached(time.monotonic())

    return until


def _attached_launch(proc) -> Launch:
    """How the process ``proc`` (a ``psutil.Process`` given to ``attach``) was started: its
    command line, working directory and real user id, each ``None``/empty when unreadable."""
    try:
        command: Tuple[str, ...] = tuple(proc.cmdline())
    except psutil.Error:
        command = ()
    try:
        cwd: Optional[str] = proc.cwd()
    except psutil.Error:
        cwd = None
    try:
        uid: Optional[int] = proc.uids().real
    except psutil.Error:
        uid = None
    return Launch(command, cwd, uid, "attach", *launch_context(proc.pid))


def _shown(text: str) -> str:
    """``text`` as is, or quoted when it has a space or an unprintable character (a CR from a
    script saved with Windows line ends: ``'/bin/bash\\r'``)."""
    return text if text and text.isprintable() and not any(c.isspace() for c in text) else repr(text)


def _interpreter(path: str) -> Optional[str]:
    """The interpreter a script's ``#!`` line names (as the kernel reads it: the first word
    after ``#!``, a trailing CR kept), or ``None`` when it has none or cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].replace(b"\t", b" ").split(b" ")
    word = next((w for w in words if w), b"")
    return os.fsdecode(word) if word else None


def start_failure(program: str, error: OSError, path: str) -> Tuple[str, int]:
    """What to say, and the exit code, when ``program`` could not be started with ``error``,
    as bash says it: 127 (:attr:`Exit.NOT_FOUND`) when it, or the interpreter its ``#!`` line
    names, does not exist (``bad interpreter /usr/bin/python9: No such file or directory``);
    126 (:attr:`Exit.CANNOT_EXECUTE`) when it exists but cannot be executed. ``path`` is the
    ``PATH`` it was looked for in when it has no ``/``."""
    found = program if "/" in program else shutil.which(program, path=path)
    if isinstance(error, FileNotFoundError):
        if not found or not os.path.isfile(found):
            return ("No such file or directory" if "/" in program else "command not found"), Exit.NOT_FOUND
        interp = _interpreter(found)  # it exists, yet exec said ENOENT: what it needs does not
        if interp is None:
            return "cannot execute: required file not found (its dynamic loader)", Exit.NOT_FOUND
        if not os.path.exists(interp):
            return f"bad interpreter {_shown(interp)}: No such file or directory", Exit.NOT_FOUND
        return f"cannot execute: required file not found (by its interpreter {_shown(interp)})", Exit.NOT_FOUND
    why = error.strerror or str(error)
    if isinstance(error, PermissionError) and found and os.access(found, os.X_OK):
        interp = _interpreter(found)  # executable itself: its interpreter is what cannot be run
        if interp is not None:
            return f"bad interpreter {_shown(interp)}: {why}", Exit.CANNOT_EXECUTE
    return why, Exit.CANNOT_EXECUTE


def _start_metrics(cfg: config_mod.Config, port_key: str = "metrics_port", source: str = "settings"):
    """``(server, collector)`` serving Prometheus metrics when ``metrics_port`` is set, else
    ``(None, None)``. ``port_key``/``source`` name where the port came from, for the error.

    Raises:
        ConfigError: the port cannot be bound, or the address does not resolve (naming it).
    """
    if cfg.metrics_port is None:
        return None, None
    import socket

    from .watch import metrics

    collector = metrics.JobMetrics(list, cfg.node or "", cfg.stall_timeout_s)
    try:
        return metrics.serve(cfg.metrics_port, collector, cfg.metrics_addr), collector
    except socket.gaierror as e:  # the address does not resolve
        raise ConfigError("metrics_addr", f"cannot listen on {cfg.metrics_addr!r}: {e.strerror or e}", source) from None
    except OSError as e:
        raise ConfigError(
            port_key, f"cannot listen on {cfg.metrics_addr}:{cfg.metrics_port}: {e.strerror or e}", source
        ) from None


def _metrics_origin(args: argparse.Namespace):
    """``(key, source)`` naming where the metrics port came from: the flag or the settings."""
    if args.metrics_port is not None:
        return "--metrics-port", "command line"
    return "metrics_port", args.config or "settings"


def _attach_metrics(collector, watcher: JobWatcher) -> None:
    if collector is not None:
        collector.watchers = watcher.metrics_view
        watcher.on_report = collector.note_report


def _hook_folder(cfg: config_mod.Config):
    """``(folder, reader)`` for the inside view of a job ``dlwatch run`` starts: a new private
    folder, or ``(None, reader saying why not)`` with ``hook: false`` or when it cannot be made."""
    if not cfg.hook:
        return None, inside.InsideReader(None, "no inside view (hook: false / --no-hook)")
    try:
        folder = inside.make_folder()
    except OSError as e:
        log(f"no inside view: cannot create its folder ({e.strerror}); watching from outside only")
        return None, inside.InsideReader(None, f"no inside view (its folder could not be created: {e.strerror})")
    return folder, inside.InsideReader(folder.path, retire=True)


def _remove(folder: Optional[inside.HookFolder]) -> None:
    if folder:
        inside.remove_folder(folder)


def _job_of(pid: int):
    """The job's main process for ``--pid`` (a worker's parent when ``pid`` is a DataLoader
    worker, said on stderr) and its process tree.

    Raises:
        TargetError: see :func:`~watchdog.collect.discovery.check_target`.
    """
    import psutil

    from . import frames

    proc = discovery.check_target(pid)
    try:
        parent = proc.parent()
        if proc.name() in frames.WORKER_COMMS and parent is not None:
            log(f"pid {proc.pid} is a DataLoader worker of pid {parent.pid}: showing that process")
            proc = parent
        elif discovery.is_dlwatch(proc.cmdline()):  # another dlwatch (`dlwatch run`): its job is its child
            job = next((c for c in proc.children() if not discovery.is_dlwatch(c.cmdline())), None)
            if job is None:
                raise TargetError(pid, "a dlwatch process with no job of its own")
            log(f"pid {proc.pid} is `dlwatch run`; showing its job, pid {job.pid}")
            proc = job
        return proc, [proc] + proc.children(recursive=True)
    except psutil.Error:
        return proc, [proc]


def cmd_dump(args: argparse.Namespace) -> int:
    """``dlwatch dump --pid N``: the stacks of the job's main process and every worker, now."""
    import json

    from .collect import pyspy
    from .collect.sampler import Sampler
    from .types import StackFailureKind

    proc, _tree = _job_of(args.pid)
    path = pyspy.find_pyspy()
    if path is None:
        log("error: py-spy not found (beside this Python or on $PATH): pip install py-spy")
        return Exit.USAGE
    sample = Sampler(proc.pid, 1.0).sample()
    pids = [p.pid for p in sample.processes if p.role in report.DUMPED_ROLES]
    d_state = [p.pid for p in sample.processes if p.state == "D"]
    stacks = pyspy.dump_all(pids, path, args.native, args.timeout, args.locals, d_state)
    doc = report.dump_document(sample, stacks)
    _print(json.dumps(doc, indent=1) if args.json else "\n".join(report.dump_lines(doc)))
    failed = [st.error for st in stacks.values() if st.error is not None]
    if failed and len(failed) == len(stacks):
        refused = any(e.kind is StackFailureKind.PTRACE_REFUSED for e in failed)
        first = next((e for e in failed if e.kind is not StackFailureKind.NOT_RUN), failed[0])
        log(f"error: no stack could be read ({first.detail}){'; see README: Permissions' if refused else ''}")
        return Exit.USAGE
    return Exit.OK


def cmd_status(args: argparse.Namespace) -> int:
    """``dlwatch status --pid N``: the job's inside view and pinned memory, now."""
    import dataclasses
    import json
    import time

    from .collect import procfs

    proc, tree = _job_of(args.pid)
    folder = inside.folder_of(proc.pid)
    reader = inside.InsideReader(
        folder.path if folder else None,
        "no inside view: start the job with `dlwatch run` or `env $(dlwatch hook-env) …`",
    )
    pids = [p.pid for p in tree]
    view = reader.read(pids)
    view = dataclasses.replace(view, forks=tuple(r for r in view.forks if r.pid in pids))  # this process's tree only
    pinned = {p.pid: procfs.pinned_bytes(p.pid) for p in tree if procfs.maps_summary(p.pid).nvidia}
    from .collect.sampler import Sampler

    sampler = Sampler(proc.pid, 1.0)
    sample = sampler.sample()  # the outside view: main and its workers now (USS, PSS once)
    doc = report.status_document(view, pinned, time.monotonic(), sample.processes)
    verdict = _input_verdict(sampler, reader, dataclasses.replace(sample, loaders=view.loaders), args.window)
    if verdict is not None:
        doc["input"] = verdict.as_dict()
    try:
        text = "\n".join(report.status_lines(doc) + (verdict.lines() if verdict is not None else []))
        print(json.dumps(doc, indent=1) if args.json else text, flush=True)
    except BrokenPipeError:  # `dlwatch status … | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return Exit.OK


def _input_verdict(sampler, reader, first, window_s: float):
    """The input-bound verdict (:func:`watchdog.diagnose.throughput.judge`) over ``window_s``
    seconds from ``first`` (a sample with the inside view's loaders): a sample every half second
    with the inside view read again; ``None`` for a window of 0."""
    import dataclasses
    import time

    from .diagnose import throughput
    from .types import MODE_LIVE, Facts

    if window_s <= 0:
        return None
    samples = [first]
    view = None
    while samples[-1].t_mono - first.t_mono < window_s:
        time.sleep(min(0.5, max(0.05, window_s - (samples[-1].t_mono - first.t_mono))))
        s = sampler.sample()
        if s.main is None:
            break
        view = reader.read([p.pid for p in s.processes])
        samples.append(dataclasses.replace(s, loaders=view.loaders, fetches=view.fetches))
    facts = Facts(
        mode=MODE_LIVE,
        sample=samples[-1],
        timeline=tuple(samples),
        host_cpus=os.cpu_count() or 1,
        inside=view if reader.folder is not None else None,
    )
    return throughput.judge(facts, window_s=window_s + 1.0, min_span_s=0.8 * window_s, min_batches=3)


def _print(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `dlwatch … | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def cmd_reports(args: argparse.Namespace) -> int:
    """``dlwatch reports [DIR]``: report folders, newest first."""
    from .report import browse

    if args.dir and args.report_dir and os.path.abspath(args.dir) != os.path.abspath(args.report_dir):
        raise WatchdogError(f"reports: DIR {args.dir!r} and --report-dir {args.report_dir!r} differ: give one")
    report_dir = args.dir or args.report_dir or config_mod.load(args.config, {}).report_dir
    table, n = browse.listing(report_dir, args.n)
    if not n and os.path.isfile(os.path.join(report_dir, "report.json")):
        _print(f"{report_dir} is one report's folder, not a folder of reports: dlwatch show {report_dir}")
    else:
        _print(table if n else f"no reports in {report_dir}")
    return Exit.OK


def cmd_show(args: argparse.Namespace) -> int:
    """``dlwatch show REPORT``: the short summary again (as stderr got it), the whole report
    (``--full``), or its HTML page."""
    from .report import browse

    if args.out and not args.html:
        raise ConfigError("--out", "goes with --html (the page it writes)", "command line")
    folder = browse.report_folder(args.report)
    if args.html:
        _print(browse.write_html(folder, args.out))
        return Exit.OK
    _print(browse.text(folder, full=args.full).rstrip("\n"))
    return Exit.OK


def cmd_hook_env() -> int:
    """Print ``PYTHONPATH=… DLWATCH_HOOK_DIR=…`` with a new private folder, for ``env $(…)``;
    say on stderr where the folder is and what removes it. Hook folders of this user that
    hold nothing and have not changed for a day are swept first (:func:`inside.sweep_stale_folders`)."""
    for stale in inside.sweep_stale_folders():
        log(f"removed {stale}: made by `dlwatch hook-env` over a day ago, and no job recorded into it")
    try:
        folder = inside.make_folder()
    except OSError as e:
        log(f"error: cannot create the inside view's folder: {e.strerror}")
        return Exit.USAGE
    log(
        f"made {folder.path} for the job's inside view: `dlwatch attach --pid N` removes it when the job ends; "
        "if no job records into it, a later `dlwatch hook-env` removes it after a day"
    )
    import shlex

    env = inside.hook_env(os.environ, folder.path, None)
    # Quoted for the shell where needed: `eval "export $(dlwatch hook-env)"` works with any path;
    # `env $(dlwatch hook-env) …` with paths that hold no spaces.
    print(
        f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])} DLWATCH_HOOK_DIR={shlex.quote(folder.path)} "
        f"{inside.TOKEN_ENV}={env[inside.TOKEN_ENV]}"
    )
    return Exit.OK


def cmd_attach(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    """Watch an already-running job until it ends."""
    proc = discovery.check_target(args.pid)
    procfs.environ(proc.pid)  # learns the job's secret values (redact.env): a crash report may quote them
    start_ticks = procfs.start_ticks(args.pid)
    wake = Waker()
    stopped: List[int] = []

    job_ended = procfs.ExitWatch(args.pid, start_ticks).ended  # asked at every tick

    def on_signal(signum, _frame) -> None:
        stopped.append(signum)
        wake.set()

    for sig in _FORWARDED:
        signal.signal(sig, on_signal)
    folder = inside.folder_of(proc.pid) if cfg.hook else None
    reader = inside.InsideReader(
        folder.path if folder else None,
        why_none=(
            "no inside view (start the job with `env $(dlwatch hook-env) …` to have one)"
            if cfg.hook
            else "no inside view (hook: false / --no-hook)"
        ),
        retire=True,
    )
    server, collector = _start_metrics(cfg, *_metrics_origin(args))
    launch = _attached_launch(proc)
    watcher = JobWatcher(cfg, proc.pid, None, lambda: job_ended() or bool(stopped), wake, inside=reader, launch=launch)
    _attach_metrics(collector, watcher)
    shown = report.one_line(" ".join(" ".join(redact.cmdline(proc.cmdline())).split()))  # one line, even for `-c`
    log(f"watching pid {proc.pid} ({shown[:120]})")
    if discovery.has_loaded_torch(proc.pid) is False:
        log(
            f"pid {proc.pid} has not imported torch (no libtorch in /proc/{proc.pid}/maps): dlwatch judges PyTorch "
            "training loops; watching anyway"
        )
    outcome = watcher.run()
    if outcome.terminated or stopped:
        first = len(stopped)  # one more signal cuts the wait for alert commands short
        watcher.alerts.wait(cfg.exec_timeout_s, lambda: len(stopped) > first)
    if outcome.terminated:
        if folder:
            inside.remove_folder(folder)  # the job dlwatch ended has no more use for it
        return Exit.TERMINATED
    if stopped:
        log(f"stopped by signal {stopped[0]}; pid {proc.pid} keeps running")
        return of_signal(stopped[0])
    watcher.after_exit(None, terminated=outcome.terminated, interrupted=lambda: bool(stopped))
    if folder:
        inside.remove_folder(folder)  # made by `dlwatch hook-env` for this job, which has ended; still that one
    resolved = f", {len(outcome.resolved)} of them a hang that resolved by itself" if outcome.resolved else ""
    log(f"pid {proc.pid} ended; {len(outcome.reports)} report(s) written{resolved}")
    return Exit.HANG_REPORTED if outcome.failures else Exit.OK


def probes_module(name: str) -> ModuleType:
    """The probes' module ``name``: in a source tree, of the ``probes`` folder beside this
    ``watchdog`` (never a top-level ``probes`` from elsewhere, which is not imported at all);
    installed, of ``watchdog.probes`` (setup.cfg's ``package_dir``).

    Raises:
        ImportError: neither is there, or the module cannot be imported.
    """
    import importlib
    import importlib.util

    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        spec = importlib.util.find_spec("probes")
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    if origin and os.path.dirname(os.path.dirname(os.path.abspath(origin))) == tree:
        return importlib.import_module(f"probes.{name}")
    return importlib.import_module(f"watchdog.probes.{name}")


def cmd_probe(probe_args: List[str]) -> int:
    """``dlwatch probe COMMAND ARGS…`` (``probe_args``): the probes are a client of the watchdog
    and need torch (the [probes] extra); :func:`probes.cli.run` runs the command and says, in one
    line with exit code 2, when it or what it needs is not installed."""
    try:
        probes_cli = probes_module("cli")
    except ImportError as e:
        print(f"dlwatch: error: the probes are not installed: {e}", file=sys.stderr)
        return Exit.USAGE
    if not probe_args:
        print("dlwatch: error: name a probe command (see `dlwatch probe --help`)", file=sys.stderr)
        return Exit.USAGE
    return probes_cli.run(probe_args)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``dlwatch`` and ``python -m watchdog``; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    instead: List[str] = []
    if argv[:1] == ["verify"] and "--" in argv:  # verify's own options may follow REPORT; its command follows --
        argv, instead = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(argv)
    if args.command == "verify":
        args.cmd = instead
    if args.command == "probe":
        return cmd_probe(args.probe_args)
    if args.command == "hook-env":
        return cmd_hook_env()
    if args.command == "cluster":
        return cluster_mod.cmd_cluster(args)
    if args.command == "verify":
        try:
            return verify_mod.cmd_verify(args, _print)
        except WatchdogError as e:
            log(f"error: {e}")
            return Exit.USAGE
    if args.command in ("status", "reports", "show", "dump"):
        try:
            return {"status": cmd_status, "reports": cmd_reports, "show": cmd_show, "dump": cmd_dump}[args.command](
                args
            )
        except WatchdogError as e:
            log(f"error: {e}")
            return Exit.USAGE
        except OSError as e:
            log(f"error: {e.filename or ''}: {e.strerror or e}")
            return Exit.USAGE
    try:
        cfg = load_config(args)
        if args.command == "run":
            return cmd_run(args, cfg)
        return cmd_attach(args, cfg)
    except WatchdogError as e:
        # A bad flag's value points to the command's help, as the parser's own errors do.
        hint = f" (see `dlwatch {args.command} --help`)" if getattr(e, "key", "").startswith("-") else ""
        log(f"error: {e}{hint}")
        return Exit.USAGE
    except KeyboardInterrupt:
        return of_signal(signal.SIGINT)


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
