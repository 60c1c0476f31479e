"""Exit codes of ``dlwatch`` and its ``probe`` commands: the one table (README "Exit codes").

``run`` also exits with the job's own exit code (128 + N when the job died of signal N), and
``attach`` with 128 + N when ``dlwatch`` itself was stopped by signal N: those are computed,
not members. The values follow common Unix use: 2 for usage (argparse, BSD ``sysexits`` aside),
124 for "ended after a timeout" as coreutils ``timeout(1)``, 126/127 as POSIX shells for a
command that cannot be executed / is not found.
"""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    """Every fixed exit code. An ``IntEnum``, so ``sys.exit(Exit.USAGE)`` exits with 2."""

    OK = 0
    """``attach``: the job ended and no report was written, or only hang reports that resolved
    by themselves (batches flowed again: ``outcome.json`` says ``resolved``; a slow wait is no
    failure of the job); ``run`` with a bound: reached and ended; ``verify``: the fix holds;
    the other commands: done."""
    FAILED = 1
    """An internal error of ``dlwatch``; ``probe``: a run failed or a scenario was misdiagnosed;
    ``verify``: the fix does not hold, or could not be proven."""
    USAGE = 2
    """A usage or configuration error, or a PID that cannot be watched; nothing was started."""
    HANG_REPORTED = 3
    """``attach``: the job ended (or watching stopped) after one or more reports other than a
    hang that resolved by itself (a hang still open or ended with the job, a crash, a warning)."""
    TERMINATED = 124
    """``run``/``attach``: the watchdog ended the job after a proven hang."""
    CANNOT_EXECUTE = 126
    """``run``: the command (or the interpreter its ``#!`` line names) exists but cannot be executed."""
    NOT_FOUND = 127
    """``run``: the command, or the interpreter its ``#!`` line names, was not found (as bash)."""


def of_signal(signum: int) -> int:
    """128 + ``signum``: the shell's code for a process ended by signal ``signum``."""
    return 128 + signum
