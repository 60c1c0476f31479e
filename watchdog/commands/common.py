"""What several commands share: the signals ``run`` and ``attach`` catch, the metrics endpoint
they serve, the job a ``--pid`` names (``dump``, ``status``) and printing to a stdout that may
be a closed pipe."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Tuple

from .. import config as config_mod
from ..collect import discovery
from ..errors import ConfigError, TargetError
from ..watch.job import log
from ..watch.node_loop import NodeLoop

# The signals `run` forwards to its job and `attach` stops on.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def print_text(text: str) -> None:
    """``text`` and a newline on stdout; a reader that went away (``dlwatch … | head``) ends the
    output quietly: stdout then points at /dev/null, so the exit does not fail flushing it."""
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `dlwatch … | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def start_metrics(cfg: config_mod.Config, port_key: str = "metrics.port", source: str = "settings"):
    """``(server, collector)`` serving Prometheus metrics when ``metrics.port`` is set, else
    ``(None, None)``. ``port_key``/``source`` name where the port came from, for the error.

    Raises:
        ConfigError: the port cannot be bound, or the address does not resolve (naming it).
    """
    if cfg.metrics.port is None:
        return None, None
    import socket

    from ..watch import metrics

    collector = metrics.JobMetrics(list, cfg.node or "", cfg.stall_timeout_s)
    try:
        return metrics.serve(cfg.metrics.port, collector, cfg.metrics.addr), collector
    except socket.gaierror as e:  # the address does not resolve
        raise ConfigError("metrics.addr", f"cannot listen on {cfg.metrics.addr!r}: {e.strerror or e}", source) from None
    except OSError as e:
        raise ConfigError(
            port_key, f"cannot listen on {cfg.metrics.addr}:{cfg.metrics.port}: {e.strerror or e}", source
        ) from None


def metrics_origin(args: argparse.Namespace) -> Tuple[str, str]:
    """``(key, source)`` naming where the metrics port came from: the flag or the settings."""
    if args.metrics_port is not None:
        return "--metrics-port", "command line"
    return "metrics.port", args.config or "settings"


def attach_metrics(collector, watcher: NodeLoop) -> None:
    """Let ``collector`` (from :func:`start_metrics`, or ``None``) read ``watcher``'s ranks and
    hear of its reports."""
    if collector is not None:
        collector.watchers = watcher.metrics_view
        watcher.on_report = collector.note_report


def job_of(pid: int):
    """The job's main process for ``--pid`` (a worker's parent when ``pid`` is a DataLoader
    worker, said on stderr) and its process tree.

    Raises:
        TargetError: see :func:`~watchdog.collect.discovery.check_target`.
    """
    import psutil

    from .. import frames

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
