"""The ``dlwatch`` argument parser and the settings its flags override. Building it imports no
command's code (each is imported when it runs) and never torch: ``dlwatch probe --help`` reads
only the probes' command table (standard library)."""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Dict, Optional

from .. import __version__
from .. import config as config_mod
from ..argtypes import UsageParser, folder, positive_float, positive_int
from . import cluster as cluster_mod
from . import verify as verify_mod
from .probe import probes_module

# Command-line flags that override settings: flag -> (dotted key, argparse type).
OVERRIDES = {
    "--interval": ("interval_s", float),
    "--stall-timeout": ("stall_timeout_s", float),
    "--on-hang": ("on_hang", str),
    "--terminate-unproven-after": ("terminate_unproven_after_s", float),
    "--terminate-grace": ("terminate_grace_s", float),
    "--report-dir": ("report_dir", str),
    "--pyspy-timeout": ("py_spy.timeout_s", float),
    "--metrics-port": ("metrics.port", int),
    "--metrics-addr": ("metrics.addr", str),
    "--node": ("node", str),
}

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
    p.add_argument("--metrics-port", type=int, metavar="PORT", help=h("metrics.port"))
    p.add_argument("--metrics-addr", metavar="ADDR", help=h("metrics.addr"))
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
    """Settings from ``--config`` and the flags (``run`` and ``attach``).

    Raises:
        ConfigError: naming the file, line and key of a bad value in the file, or the flag
            (``command line: --interval: …``) of a bad value given on the command line.
    """
    overrides: Dict[str, object] = {}
    flag_of = {}
    for flag, (key, _type) in OVERRIDES.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            overrides[key] = value
            flag_of[key] = flag
    if args.no_native:
        overrides["py_spy.native"] = False
    if args.no_hook:
        overrides["hook"] = False
    return config_mod.load(args.config, overrides, flag_of)
