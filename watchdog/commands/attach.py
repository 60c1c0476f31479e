"""``dlwatch attach --pid N``: watch an already-running job until it ends (or dlwatch is
stopped: the job keeps running)."""

from __future__ import annotations

import argparse
import signal
from typing import List, Optional, Tuple

import psutil

from .. import config as config_mod
from .. import redact
from ..collect import discovery, inside, procfs
from ..collect.launch import context as launch_context
from ..exits import Exit, of_signal
from ..text import one_line
from ..types import Launch
from ..watch.job import WatchedJob, log
from ..watch.node_loop import NodeLoop
from ..watch.wake import Waker
from .common import FORWARDED, attach_metrics, metrics_origin, start_metrics


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


def cmd_attach(args: argparse.Namespace, cfg: config_mod.Config) -> int:
    """Watch the job of ``--pid`` until it ends: exit code 0, or 3 (:attr:`Exit.HANG_REPORTED`)
    when a failure was reported, 124 when dlwatch ended it, 128 + N when stopped by signal N.

    Raises:
        TargetError: the pid cannot be watched (:func:`~watchdog.collect.discovery.check_target`).
        ConfigError: the metrics port cannot be served.
    """
    proc = discovery.check_target(args.pid)
    procfs.environ(proc.pid)  # learns the job's secret values (redact.env): a crash report may quote them
    start_ticks = procfs.start_ticks(args.pid)
    wake = Waker()
    stopped: List[int] = []

    job_ended = procfs.ExitWatch(args.pid, start_ticks).ended  # asked at every tick

    def on_signal(signum, _frame) -> None:
        stopped.append(signum)
        wake.set()

    for sig in FORWARDED:
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
    server, collector = start_metrics(cfg, *metrics_origin(args))
    launch = _attached_launch(proc)
    job = WatchedJob(proc.pid, None, lambda: job_ended() or bool(stopped), inside=reader, launch=launch)
    watcher = NodeLoop(cfg, job, wake)
    attach_metrics(collector, watcher)
    shown = one_line(" ".join(" ".join(redact.cmdline(proc.cmdline())).split()))  # one line, even for `-c`
    log(f"watching pid {proc.pid} ({shown[:120]})")
    if discovery.has_loaded_torch(proc.pid) is False:
        log(
            f"pid {proc.pid} has not imported torch (no libtorch in /proc/{proc.pid}/maps): dlwatch judges PyTorch "
            "training loops; watching anyway"
        )
    outcome = watcher.run()
    if outcome.terminated or stopped:
        first = len(stopped)  # one more signal cuts the wait for alert commands short
        watcher.alerts.wait(cfg.alerts.exec_timeout_s, lambda: len(stopped) > first)
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
