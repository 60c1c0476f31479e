"""``dlwatch show REPORT``: the short summary again (as stderr got it), the whole report
(``--full``), or its HTML page (``--html``)."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..exits import Exit
from ..report import browse
from .common import print_text


def cmd_show(args: argparse.Namespace) -> int:
    """Print the report (or the HTML page's path); exit code 0.

    Raises:
        ConfigError: ``--out`` without ``--html``.
        WatchdogError: ``REPORT`` is no report (:func:`~watchdog.report.browse.report_folder`).
        OSError: it cannot be read, or the page cannot be written.
    """
    if args.out and not args.html:
        raise ConfigError("--out", "goes with --html (the page it writes)", "command line")
    folder = browse.report_folder(args.report)
    if args.html:
        print_text(browse.write_html(folder, args.out))
        return Exit.OK
    print_text(browse.text(folder, full=args.full).rstrip("\n"))
    return Exit.OK
