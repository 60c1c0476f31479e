"""Write a report folder atomically: files go into a hidden temporary folder beside the
destination, which is renamed into place once complete (gunicorn ``pidfile.py`` does the
same for its pid file). The folder is ``0700`` and its files ``0600``: reports may hold
environment values and stack locals.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Callable, Optional, Sequence

from .errors import ReportWriteError
from .types import Report


def _write_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write(report: Report, report_dir: str) -> str:
    """Write ``report`` to ``<report_dir>/<report.folder_name>/`` and return that path.

    Raises:
        ReportWriteError: the folder cannot be created or written (full disk, permission);
            nothing partial is left behind.
    """
    try:
        os.makedirs(report_dir, mode=0o700, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{report.folder_name}.", dir=report_dir)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise ReportWriteError(report_dir, getattr(e, "strerror", None) or str(e)) from None
    final = os.path.join(report_dir, report.folder_name)
    try:
        os.chmod(tmp, 0o700)
        _write_file(os.path.join(tmp, "report.json"), json.dumps(report.document, indent=1, default=str) + "\n")
        _write_file(os.path.join(tmp, "report.txt"), report.text)
        for name, text in report.raw_files:
            _write_file(os.path.join(tmp, name), text)
        n = 1
        while os.path.exists(final):
            n += 1
            final = os.path.join(report_dir, f"{report.folder_name}.{n}")
        os.rename(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ReportWriteError(final, e.strerror or str(e)) from None
    return final


def write_with_fallback(
    report: Report, report_dirs: Sequence[str], on_fallback: Optional[Callable[[str], None]] = None
) -> str:
    """:func:`write` to the first of ``report_dirs`` that works; ``on_fallback`` is told why
    the first one failed when another was used.

    Raises:
        ReportWriteError: every folder failed; the message names the first one.
    """
    first_error = None
    for d in report_dirs:
        try:
            path = write(report, d)
            if first_error is not None and on_fallback is not None:
                on_fallback(f"{first_error}; wrote to {d} instead")
            return path
        except ReportWriteError as e:
            first_error = first_error or e
    assert first_error is not None
    raise first_error
