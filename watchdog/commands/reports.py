"""``dlwatch reports [DIR]``: report folders, newest first."""

from __future__ import annotations

import argparse
import os

from .. import config as config_mod
from ..errors import WatchdogError
from ..exits import Exit
from ..report import browse
from .common import print_text


def cmd_reports(args: argparse.Namespace) -> int:
    """Print the table of reports in the folder (``DIR``, ``--report-dir`` or the settings'
    ``report_dir``); exit code 0.

    Raises:
        WatchdogError: ``DIR`` and ``--report-dir`` name different folders.
        ConfigError: the ``--config`` file is bad.
        OSError: the folder cannot be read.
    """
    if args.dir and args.report_dir and os.path.abspath(args.dir) != os.path.abspath(args.report_dir):
        raise WatchdogError(f"reports: DIR {args.dir!r} and --report-dir {args.report_dir!r} differ: give one")
    report_dir = args.dir or args.report_dir or config_mod.load(args.config, {}).report_dir
    table, n = browse.listing(report_dir, args.n)
    if not n and os.path.isfile(os.path.join(report_dir, "report.json")):
        print_text(f"{report_dir} is one report's folder, not a folder of reports: dlwatch show {report_dir}")
    else:
        print_text(table if n else f"no reports in {report_dir}")
    return Exit.OK
