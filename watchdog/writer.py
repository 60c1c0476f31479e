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
from typing import Callable, Optional

from .collect import inside
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


OUTCOME_FILE = "outcome.json"
# What the last `dlwatch verify` of a report concluded, in the report's folder (watchdog.verify).
VERIFY_FILE = "verify.json"


def write_verify(folder: str, verdict: dict) -> None:
    """Write what ``dlwatch verify`` concluded of a report's fix as ``<folder>/verify.json``
    (:func:`write_json`); a later verify replaces it.

    Raises:
        ReportWriteError: the file cannot be written.
    """
    write_json(os.path.join(folder, VERIFY_FILE), verdict)


def write_outcome(folder: str, outcome: dict) -> None:
    """Write ``outcome`` (what became of a reported hang: resolved, terminated, the job's end)
    as ``<folder>/outcome.json`` (:func:`write_json`); ``folder`` is a report folder
    :func:`write` made. A later outcome replaces an earlier one.

    Raises:
        ReportWriteError: the file cannot be written (full disk, the folder gone).
    """
    write_json(os.path.join(folder, OUTCOME_FILE), outcome)


def write_json(path: str, doc: dict) -> None:
    """Write ``doc`` as JSON to ``path``, atomically (a temporary file beside it, ``0600``,
    created exclusively and renamed over ``path``): a reader sees the old file or the new one.

    Raises:
        ReportWriteError: the file cannot be written (full disk, the folder gone); names
            ``path``'s folder.
    """
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        _write_file(tmp, json.dumps(doc, indent=1, default=str) + "\n")
        os.rename(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ReportWriteError(folder or ".", e.strerror or str(e)) from None


# The fallback folder's name in the temporary directory (``$TMPDIR``).
FALLBACK_NAME = "dlwatch-reports"


def fallback_dir(base: Optional[str] = None) -> str:
    """The folder for reports when ``report_dir`` cannot be written: ``dlwatch-reports`` in the
    temporary directory ``base`` when it is this user's own and private (made 0700 when
    missing), else a fresh private ``dlwatch-reports-XXXXXXXX`` there. Another user may have
    made ``/tmp/dlwatch-reports`` first, or a link by that name: a root dlwatch never writes
    through either.

    Raises:
        ReportWriteError: not even a fresh folder can be made.
    """
    base = base or tempfile.gettempdir()
    path = os.path.join(base, FALLBACK_NAME)
    try:
        os.mkdir(path, 0o700)
    except OSError:
        pass  # there already (ours or another's), or base is not writable: checked next
    if inside.private_dir(path) is not None and inside.safe_parent(path):
        return path
    try:
        return tempfile.mkdtemp(prefix=FALLBACK_NAME + "-", dir=base)
    except OSError as e:
        raise ReportWriteError(path, e.strerror or str(e)) from None


def write_with_fallback(
    report: Report,
    report_dir: str,
    on_fallback: Optional[Callable[[str], None]] = None,
    fallback_base: Optional[str] = None,
) -> str:
    """:func:`write` to ``report_dir``, or when that fails to :func:`fallback_dir` (in
    ``fallback_base``, default the temporary directory); ``on_fallback`` is told why and where.

    Raises:
        ReportWriteError: both failed; the message names ``report_dir``.
    """
    try:
        return write(report, report_dir)
    except ReportWriteError as e:
        first_error = e
    try:
        other = fallback_dir(fallback_base)
        path = write(report, other)
    except ReportWriteError:
        raise first_error from None
    if on_fallback is not None:
        on_fallback(f"{first_error}; wrote to {other} instead")
    return path
