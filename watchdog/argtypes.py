"""What ``dlwatch``'s parser and the probes' parsers share: one-line usage errors and the
argparse ``type=`` callables for paths and counts, so that a bad flag is refused while the
command line is parsed, before any job starts or torch is imported.

:class:`UsageParser` turns every error into one line that names the flag and the value and
points to the help of the (sub)command it belongs to, exit code 2 (:attr:`Exit.USAGE`). A
``type=`` callable here raises :class:`argparse.ArgumentTypeError` with what is wrong only
(``not a folder``); the parser puts the flag and the value in front (``--report-dir X: not a
folder``). Standard library only: building a parser imports nothing else.
"""

from __future__ import annotations

import argparse
import os
import stat
from typing import NoReturn

from .exits import Exit

# An error line is one line of at most this many characters of message (before the help hint).
MAX_ERROR_CHARS = 200
# A value echoed in an error is cut to this many characters.
_MAX_VALUE_CHARS = 80


def shown(text: str) -> str:
    """``text`` as an error line shows it: ``''`` when empty, cut to 80 characters."""
    if not text:
        return "''"
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``message`` on one line (each run of whitespace, newlines included, made one space),
    cut to ``limit`` characters (argparse echoes a bad value whole: a 5000-digit port)."""
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


class UsageParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, exit code 2 (:attr:`Exit.USAGE`):
    ``dlwatch: error: MESSAGE (see `PROG --help`)``.

    - A ``type=`` callable's :class:`argparse.ArgumentTypeError` reads ``FLAG VALUE: MESSAGE``.
    - Unrecognized arguments are an error of the parser that met them, so a subcommand's
      (``dlwatch attach --bogus``) points to the subcommand's help, not to ``dlwatch --help``.
    """

    def error(self, message: str) -> NoReturn:
        """Print the one line and exit with :attr:`Exit.USAGE`."""
        self.exit(Exit.USAGE, f"dlwatch: error: {one_line(message)} (see `{self.prog} --help`)\n")

    def parse_known_args(self, args=None, namespace=None):
        """As ``ArgumentParser.parse_known_args``, but unrecognized arguments are :meth:`error`
        here, in the parser (or subparser) that met them."""
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _get_value(self, action: argparse.Action, arg_string: str):
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as e:
            if not isinstance(e.__context__, argparse.ArgumentTypeError):
                raise
            flag = max(action.option_strings, key=len) + " " if action.option_strings else ""
            raise argparse.ArgumentError(None, f"{flag}{shown(arg_string)}: {e.message}") from None


def _plain(text: str) -> None:
    """Refuse a path that names nothing: empty, or with a NUL byte (``os`` calls would raise)."""
    if not text:
        raise argparse.ArgumentTypeError("names no path")
    if "\0" in text:
        raise argparse.ArgumentTypeError("contains a NUL byte")


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (``dlwatch reports -n``).

    Raises:
        argparse.ArgumentTypeError: not a whole number, or below 1.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number of seconds above 0, at most a day (``dlwatch dump
    --timeout``).

    Raises:
        argparse.ArgumentTypeError: not a number, not above 0, or above a day.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError("must be above 0 and at most 86400 (a day)")
    return value


def folder(text: str) -> str:
    """An argparse ``type``: a folder that exists, or that can be made (``--report-dir``):
    neither an existing file (or link to nothing) nor under one. Returns ``text``.

    Raises:
        argparse.ArgumentTypeError: ``not a folder``, or ``P is not a folder`` for the nearest
            existing folder above it that is not one; empty, or with a NUL byte.
    """
    _plain(text)
    if os.path.lexists(text):
        if not os.path.isdir(text):
            raise argparse.ArgumentTypeError("not a folder")
        return text
    above = os.path.dirname(os.path.abspath(text))
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise argparse.ArgumentTypeError(f"{shown(above)} is not a folder")
    return text


def output_file(text: str) -> str:
    """An argparse ``type``: a file a command will write (``--json PATH``): in a folder that
    exists and can be written, and itself new or a regular file (never a folder, device, FIFO
    or link, which writing would block on or replace). Returns ``text``.

    Raises:
        argparse.ArgumentTypeError: naming what is wrong (``no such folder /a``, ``is a
            folder``, …); empty, or with a NUL byte.
    """
    _plain(text)
    try:
        mode = os.lstat(text).st_mode
    except (FileNotFoundError, NotADirectoryError):  # new, or under a file: its folder says which
        mode = None
    except OSError as e:  # a path too long, a folder that cannot be searched, …
        raise argparse.ArgumentTypeError(f"cannot write there: {e.strerror or e}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise argparse.ArgumentTypeError("is a folder")
    if mode is not None and not stat.S_ISREG(mode):
        raise argparse.ArgumentTypeError("exists and is not a regular file (a device, FIFO or link)")
    parent = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(parent):
        what = "is not a folder" if os.path.lexists(parent) else "does not exist"
        raise argparse.ArgumentTypeError(f"its folder {shown(parent)} {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"its folder {shown(parent)} is not writable")
    return text
