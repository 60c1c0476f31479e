"""``dlwatch``: the command line's entry. The only module that turns a :class:`WatchdogError`
into one line and an exit code; each subcommand lives in :mod:`watchdog.commands` (one module
each, imported only when it runs; verify and cluster also for their parsers), the parser in
:mod:`watchdog.commands.parser`.

Exit codes: the members of :class:`watchdog.exits.Exit` (README "Exit codes" describes each
command's); ``run`` also passes on the job's own code, and ``attach`` 128 + N after signal N.
"""

from __future__ import annotations

import signal
import sys
from typing import List, Optional

from .commands.parser import build_parser, load_config
from .errors import WatchdogError
from .exits import Exit, of_signal

__all__ = ["build_parser", "main"]


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
        from .commands.probe import cmd_probe

        return cmd_probe(args.probe_args)
    if args.command == "hook-env":
        from .commands.hook_env import cmd_hook_env

        return cmd_hook_env()
    if args.command == "cluster":
        from .commands.cluster import cmd_cluster

        return cmd_cluster(args)
    from .watch.job import log

    if args.command == "verify":
        from .commands.common import print_text
        from .commands.verify import cmd_verify

        try:
            return cmd_verify(args, print_text)
        except WatchdogError as e:
            log(f"error: {e}")
            return Exit.USAGE
    if args.command in ("status", "reports", "show", "dump"):
        try:
            return _look(args)
        except WatchdogError as e:
            log(f"error: {e}")
            return Exit.USAGE
        except OSError as e:
            log(f"error: {e.filename or ''}: {e.strerror or e}")
            return Exit.USAGE
    try:
        cfg = load_config(args)
        if args.command == "run":
            from .commands.run import cmd_run

            return cmd_run(args, cfg)
        from .commands.attach import cmd_attach

        return cmd_attach(args, cfg)
    except WatchdogError as e:
        # A bad flag's value points to the command's help, as the parser's own errors do.
        hint = f" (see `dlwatch {args.command} --help`)" if getattr(e, "key", "").startswith("-") else ""
        log(f"error: {e}{hint}")
        return Exit.USAGE
    except KeyboardInterrupt:
        return of_signal(signal.SIGINT)


def _look(args) -> int:
    """Run ``status``, ``reports``, ``show`` or ``dump``: the commands that only read."""
    if args.command == "status":
        from .commands.status import cmd_status

        return cmd_status(args)
    if args.command == "reports":
        from .commands.reports import cmd_reports

        return cmd_reports(args)
    if args.command == "show":
        from .commands.show import cmd_show

        return cmd_show(args)
    from .commands.dump import cmd_dump

    return cmd_dump(args)
