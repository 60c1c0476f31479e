"""The ``probe`` commands: ``dlwatch probe COMMAND [ARGS…]`` (also ``python -m probes …``).

:data:`COMMANDS` is the one table of commands: name -> (where its ``main(argv) -> int`` is,
one-line help). :func:`add_commands` turns it into argparse subparsers, under ``dlwatch``'s
``probe`` parser (watchdog/cli.py) or under :func:`build_parser`'s own (``python -m probes``),
so both list the same commands with the same help and refuse an unknown one the same way: one
line, exit code 2. A command's own arguments are parsed by its ``main``, whose parser has the
prog ``dlwatch probe NAME`` (so ``dlwatch probe bench --help`` prints ``bench``'s help).

This module imports the standard library, :mod:`watchdog.exits` and :mod:`watchdog.argtypes`
only: building the parser never imports torch, rich or a command's module; a command's module
is imported when it runs. It also holds what every command's parser shares: :class:`Parser`
(one-line errors naming the flag and pointing to the command's own ``--help``, exit 2),
:class:`HelpFormatter` (each default shown once) and the ``type=`` callables that refuse a bad
value while parsing, before anything runs: :func:`positive_seconds`, :func:`float_range`,
:func:`int_range`, :func:`int_list`, :func:`choice_list`, and (from :mod:`watchdog.argtypes`)
:func:`positive_int`, :func:`folder`, :func:`output_file`.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import signal
import sys
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from watchdog.argtypes import UsageParser, folder, output_file, positive_int, shown
from watchdog.exits import Exit

from . import module_name
from .env import private_tmpdir

__all__ = [
    "COMMANDS",
    "MAX_WORKERS",
    "Parser",
    "HelpFormatter",
    "add_commands",
    "build_parser",
    "choice_list",
    "folder",
    "int_list",
    "int_range",
    "main",
    "output_file",
    "positive_int",
    "positive_seconds",
    "plot_file",
    "MAX_SECONDS",
    "run",
    "float_range",
]

# name -> ("module" or "module:function", one-line help). The function defaults to ``main``; it
# takes the command's arguments (a list of str) and returns the exit code. One line per command.
COMMANDS: Dict[str, Tuple[str, str]] = {
    "repro": (
        module_name("repro"),
        "run known DataLoader failures under the watchdog and check each diagnosis: repro NAME…|--all|--cases|--list",
    ),
    "bench": (
        module_name("bench.commands:bench_main"),
        "DataLoader throughput over a grid of configurations, each in a fresh subprocess",
    ),
    "autotune": (
        module_name("bench.commands:autotune_main"),
        "the best num_workers (and whether pin_memory helps) without running the full grid",
    ),
    "seed-check": (
        module_name("bench.commands:seed_check_main"),
        "three folk claims about num_workers and pin_memory, checked with measured ratios",
    ),
    "rhythm": (
        module_name("rhythm"),
        "healthy loaders' intervals between batches (p50, p99, longest): the stall rule's defaults",
    ),
    "hook-cost": (
        module_name("hook_cost"),
        "what the inside view's recorder costs a job, in paired runs with and without it",
    ),
    "overhead": (
        module_name("overhead"),
        "the sidecar's own cost: CPU, tick time, RSS, the job's throughput watched vs unwatched",
    ),
}

PROG = "dlwatch probe"
DESCRIPTION = "Reproductions and benchmarks of DataLoader jobs (they need the [probes] extra)."
EPILOG = (
    "`dlwatch probe COMMAND --help` for a command's own arguments. Exit codes: 0 done; 1 a run failed or a scenario "
    "was misdiagnosed; 2 bad input."
)
# Where add_commands puts the command and its arguments: [COMMAND, ARGS…].
DEST = "probe_args"


# The most DataLoader workers a probe accepts (--num-workers, --workers): a typo guard.
MAX_WORKERS = 1024


# How long each command takes on this project's 2-core VM (Python 3.11, torch CPU, other work
# beside it: load average about 5), measured on 2026-12-05 with `time dlwatch probe …` (a round
# of rhythm; one run or round of the others), the defaults' totals added up from those; each
# command's --help ends with its line. The long ones print an estimate for the flags given when
# they start (:func:`say_estimate`), from the same per-run figures (each module's constants).
RUN_TIMES: Dict[str, str] = {
    "repro": (
        "Run time on a 2-core VM: about 15-20 s a scenario (worker_stuck 15 s, lock_order_in_worker 14 s); "
        "--all (every scenario) about 15 min, --cases (every case) about 35 min; --verify re-runs each fixable job "
        "twice more. It prints an estimate when it runs more than one."
    ),
    "bench": (
        "Run time on a 2-core VM: about 8 s a run (a fresh Python importing torch, then its samples), more "
        "with --cpu-ms or --io-ms; with no flags, 8 configurations x 3 repeats about 3-4 min, up to 2 min more "
        "when --extra-rounds are needed. It prints an estimate when it starts."
    ),
    "autotune": (
        "Run time on a 2-core VM: about 8 s a run; with no flags (4 num_workers candidates, each measured "
        "beside another, 3 runs each) about 2-4 min. It prints an estimate when it starts."
    ),
    "seed-check": (
        "Run time on a 2-core VM: about 8 s a run; its 3 configurations (2 without CUDA: pin_memory is not "
        "measured there) x 3 repeats about 1-2 min. It prints an estimate when it starts."
    ),
    "rhythm": (
        "Run time on a 2-core VM: all 9 variants took 125 s for one round (about 14 s a variant); each "
        "--rounds adds as much, and --load busy processes slow every variant down. It prints an estimate "
        "when it starts."
    ),
    "hook-cost": (
        "Run time on a 2-core VM: about 11 s a round (two runs of a loader); with no flags (5 rounds x 3 "
        "loaders) about 3 min. It prints an estimate when it starts."
    ),
    "overhead": (
        "Run time on a 2-core VM: each run takes --warmup + --seconds and about 10 s to start, two runs a "
        "pair (--pairs 1 --seconds 5 --warmup 5 --no-hang: 40 s); with no flags (one N, 3 pairs of 20 + 20 s, "
        "a hang run) about 5-6 min; more N, many workers or --ranks, --full-timeline and --churn add to it. "
        "It prints an estimate when it starts."
    ),
}


def minutes(seconds: float) -> str:
    """``45 s``, ``6 min``, ``1 h 20 min``: a run time as an estimate says it (rounded up to the
    minute above a minute)."""
    if seconds < 60:
        return f"{max(1, math.ceil(seconds / 5) * 5):.0f} s"
    total = math.ceil(seconds / 60)
    return f"{total} min" if total < 60 else f"{total // 60} h {total % 60} min"


# The shortest estimate said when a command starts, in seconds: a shorter run needs none.
LONG_S = 60.0


def say_estimate(name: str, seconds: float, how: str) -> None:
    """Print on stderr, before a long command ``name`` starts measuring, about how long it will
    take with the flags given: ``dlwatch probe NAME: about 6 min on a 2-core machine (HOW)``.
    ``seconds`` is the command's own estimate from its flags and the per-run times of
    :data:`RUN_TIMES`; ``how`` says what it added up. Nothing is printed under :data:`LONG_S`."""
    if seconds < LONG_S:
        return
    print(
        f"dlwatch probe {name}: expect about {minutes(seconds)} on a 2-core machine ({how}); less on a faster one",
        file=sys.stderr,
        flush=True,
    )


class Parser(UsageParser):
    """An ``ArgumentParser`` whose errors are one line naming the input and pointing to
    ``PROG --help``, exit code 2 (:attr:`Exit.USAGE`; see :class:`watchdog.argtypes.UsageParser`),
    and whose help shows each default once (:class:`HelpFormatter`). A command's parser
    (``prog`` ``dlwatch probe NAME``) ends its help with the command's run time
    (:data:`RUN_TIMES`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        prog = kwargs.get("prog") or ""
        name = prog[len(PROG) + 1 :] if prog.startswith(PROG + " ") else ""
        if name in RUN_TIMES:
            kwargs["epilog"] = " ".join(x for x in (kwargs.get("epilog"), RUN_TIMES[name]) if x)
        super().__init__(*args, **kwargs)


def _number(x: float) -> str:
    """``100000000``, ``0.1``, ``60``: a bound as an error or a help text shows it."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _span(low: float, high: Optional[float], above: bool = False) -> str:
    """``from 1 to 1024``, ``at least 1``, ``above 0``: the range of a type's values, in words."""
    if high is None:
        return f"above {_number(low)}" if above else f"at least {_number(low)}"
    if above:
        return f"above {_number(low)} and at most {_number(high)}"
    return f"from {_number(low)} to {_number(high)}"


def int_range(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` to ``high`` (no upper bound when
    ``None``), e.g. ``int_range(1, 100)`` for ``--repeats``. Its error names the range.

    >>> int_range(1, 4)("3")
    3
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number (must be {_span(low, high)})") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a whole number {_span(low, high)}")
        return value

    parse.__name__ = f"int_range({low}, {high})"
    return parse


def float_range(low: float, high: Optional[float] = None, above: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number from ``low`` (above it when ``above``) to ``high``
    (no upper bound when ``None``), e.g. ``float_range(0.1, 60)`` for ``--interval``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number (must be {_span(low, high, above)})") from None
        if not math.isfinite(value) or value < low or (above and value == low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a number {_span(low, high, above)}")
        return value

    parse.__name__ = f"float_range({low}, {high})"
    return parse


def _items(text: str) -> List[str]:
    """The items of a comma list, stripped.

    Raises:
        argparse.ArgumentTypeError: the list or one of its items is empty.
    """
    items = [part.strip() for part in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError("empty list")
    if not all(items):
        raise argparse.ArgumentTypeError("an empty item in the comma list")
    return items


def int_list(low: int, high: int, words: Iterable[str] = ()) -> Callable[[str], str]:
    """An argparse ``type``: a comma list of whole numbers from ``low`` to ``high`` (and of
    ``words``, e.g. ``auto``). Returns the text as given: the command expands it.

    >>> int_list(0, 1024, ["auto"])("0, 4,auto")
    '0, 4,auto'
    """
    allowed = tuple(words)
    also = f", or {' or '.join(allowed)}" if allowed else ""

    def parse(text: str) -> str:
        items = _items(text)
        for item in items:
            if item in allowed:
                continue
            try:
                value: Optional[int] = int(item)
            except ValueError:
                value = None
            if value is None or not low <= value <= high:
                which = "" if len(items) == 1 else f"item {shown(item)}: each "
                raise argparse.ArgumentTypeError(f"{which}must be a whole number from {low} to {high}{also}")
        return text

    parse.__name__ = f"int_list({low}, {high})"
    return parse


def choice_list(choices: Iterable[str], ignore_case: bool = False) -> Callable[[str], str]:
    """An argparse ``type``: a comma list of items from ``choices`` (compared in lower case
    when ``ignore_case``). Returns the text as given: the command splits it."""
    known = tuple(choices)
    lookup = {c.lower() for c in known} if ignore_case else set(known)

    def parse(text: str) -> str:
        for item in _items(text):
            if (item.lower() if ignore_case else item) not in lookup:
                raise argparse.ArgumentTypeError(f"unknown item {shown(item)!r}; choose from {', '.join(known)}")
        return text

    parse.__name__ = "choice_list"
    return parse


# The longest any probe waits or measures, in seconds (a day): a typo guard, and what keeps
# a deadline within what time.monotonic() arithmetic and select() accept (1e300 overflows).
MAX_SECONDS = 86400.0


def positive_seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds above 0 and at most
    :data:`MAX_SECONDS` (``--timeout``).

    Raises:
        argparse.ArgumentTypeError: not a number, not finite, not above 0, or above a day.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, up to {MAX_SECONDS:g}")
    return value


# The file types matplotlib's savefig writes with its default (Agg, PDF, PS, SVG) backends;
# a name without one of these would be refused, or silently get ".png" appended, after the runs.
PLOT_TYPES = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")


def plot_file(text: str) -> str:
    """An argparse ``type``: an :func:`output_file` whose name ends in a type matplotlib writes
    (:data:`PLOT_TYPES`), checked before the runs that the plot would show. Returns ``text``.

    Raises:
        argparse.ArgumentTypeError: as :func:`output_file`, or another (or no) file type.
    """
    ext = os.path.splitext(text)[1].lower().lstrip(".")
    if ext not in PLOT_TYPES:
        raise argparse.ArgumentTypeError(f"must end in .png, .svg, .pdf or another of {', '.join(PLOT_TYPES)}")
    return output_file(text)


class HelpFormatter(argparse.HelpFormatter):
    """Appends `` (default: X)`` to an option's help unless the help already speaks of its
    default, or the default says nothing (``None``, ``False``, a flag's ``store_true``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "default" in text.lower()
            or action.default is None
            or action.default is False
            or action.default == argparse.SUPPRESS
        ):
            return text
        if not action.option_strings:
            return text
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction)):
            return text
        return f"{text} (default: %(default)s)"


class _PassThrough(argparse.ArgumentParser):
    """A command's subparser: it parses nothing and hands every argument to the command's own
    ``main`` (which has the real parser, so ``--help`` after the command is the command's)."""

    def __init__(self, *args, command: str, **kwargs) -> None:
        kwargs["add_help"] = False
        super().__init__(*args, **kwargs)
        self.command = command

    def parse_known_args(self, args=None, namespace=None):
        namespace = argparse.Namespace() if namespace is None else namespace
        setattr(namespace, DEST, [self.command, *(sys.argv[1:] if args is None else args)])
        return namespace, []


def add_commands(parser: argparse.ArgumentParser) -> None:
    """Add one subparser per entry of :data:`COMMANDS` to ``parser`` (``dlwatch``'s ``probe``
    parser, or :func:`build_parser`'s). After parsing, ``args.probe_args`` is ``[COMMAND,
    ARGS…]``, for :func:`run`. An unknown or missing command is ``parser.error``."""
    sub = parser.add_subparsers(dest="probe_command", metavar="COMMAND", required=True, parser_class=_PassThrough)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, command=name, prog=f"{PROG} {name}")


def build_parser() -> argparse.ArgumentParser:
    """The ``dlwatch probe`` parser on its own (``python -m probes``)."""
    parser = Parser(prog=PROG, description=DESCRIPTION, epilog=EPILOG)
    add_commands(parser)
    return parser


def _entry(name: str):
    """The ``main(argv) -> int`` of command ``name``.

    Raises:
        ImportError: its module, or a module it needs, cannot be imported.
        AttributeError: the module has no such function.
    """
    target = COMMANDS[name][0]
    name, _, function = target.partition(":")
    module = importlib.import_module(name)
    return getattr(module, function or "main")


def run(probe_args: List[str]) -> int:
    """Run ``[COMMAND, ARGS…]`` (as :func:`add_commands` leaves them) and return its exit code.
    A command whose module is missing from this installation, or whose dependencies (the
    ``[probes]`` extra) are, is one line and :attr:`Exit.USAGE`; the other commands are not
    affected. An unknown command is :attr:`Exit.USAGE` too."""
    name, argv = probe_args[0], list(probe_args[1:])
    if name not in COMMANDS:
        print(f"dlwatch: error: unknown probe command {name!r}; choose from: {', '.join(COMMANDS)}", file=sys.stderr)
        return Exit.USAGE
    module_name = COMMANDS[name][0].partition(":")[0]
    try:
        entry = _entry(name)
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            why = f"its module {module_name} is not in this installation"
        else:
            why = f"it needs the [probes] extra (torch, matplotlib, rich): {e}"
        print(f"dlwatch: error: probe command {name!r} is not available: {why}", file=sys.stderr)
        return Exit.USAGE
    except AttributeError as e:
        print(f"dlwatch: error: probe command {name!r} is not available: {e}", file=sys.stderr)
        return Exit.USAGE
    # SIGTERM as SIGINT: an exception, so that the `finally` blocks run (the private TMPDIR, the
    # recorder's folders, the jobs' sessions), which SIGTERM's default action would skip.
    stopped = []

    def interrupt(signum, _frame) -> None:
        stopped.append(signum)
        raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)
    if before in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, interrupt)
    try:
        with private_tmpdir():  # what the probe's jobs leave in TMPDIR goes with it
            return int(entry(argv))
    except BrokenPipeError:  # `dlwatch probe repro --list | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    except KeyboardInterrupt:
        signum = stopped[-1] if stopped else signal.SIGINT
        print(f"dlwatch: probe {name}: stopped by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum
    finally:
        if before in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, before or signal.SIG_DFL)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m probes COMMAND [ARGS…]``: parse, then :func:`run`; 2 for bad input."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return run(getattr(args, DEST))
