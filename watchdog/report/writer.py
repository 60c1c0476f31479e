"""Write a report folder atomically: files go into a hidden temporary folder beside the
destination, which is renamed into place once complete (gunicorn ``pidfile.py`` does the
same for its pid file). The folder is ``0700`` and its files ``0600``: reports may hold
environment values and stack locals.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
import time
from typing import Callable, Optional

from ..errors import ReportWriteError
from ..safefiles import private_dir, safe_parent
from ..types import Report

# How a folder dlwatch writes into is opened: once, never through a link; files are then made
# relative to it (openat(2), renameat(2)), so that the folder's path swapped for a link
# meanwhile changes nothing.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_file(path: str, text: str, dir_fd: Optional[int] = None) -> None:
    """Create ``path`` (in ``dir_fd``) and write ``text`` as UTF-8; a character UTF-8 cannot
    encode (a surrogate: the undecodable bytes of a process name the job chose) is written as
    its ``\\udcNN`` escape, never raised. Raises OSError when the file cannot be made."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


# The default ``report_dir`` (config.py): relative, so in the working directory, which may be a
# shared one (a sticky project folder, a group's NFS share) where another user made it first.
DEFAULT_DIR = "dlwatch-reports"
# A hidden temporary folder of a report being written (``.<folder name>.XXXXXXXX``, mkdtemp's
# 8 characters), left behind when the writer was killed (SIGKILL, a power cut) ...
_TEMP_NAME = re.compile(r"\.\d{8}T\d{6}Z-[A-Za-z0-9_.-]+\.[A-Za-z0-9_]{8}\Z")
# ... is swept by the next write to that report_dir once it is this old (seconds): a report is
# written within seconds, even on NFS.
STALE_TEMP_S = 600.0


def _default_dir_usable(report_dir: str) -> None:
    """The default relative ``report_dir`` (:data:`DEFAULT_DIR` in the working directory) is
    used only as :func:`fallback_dir` uses its folder: a directory (not a link) of this user
    that neither group nor others can write, whose parent nobody else can rename entries of
    (this user's own and not world-writable, or a sticky root folder:
    :func:`watchdog.safefiles.safe_parent`). It is made (0700) when missing.

    Raises:
        ReportWriteError: it is a link, another user's, open to others, or in a folder another
            user could swap it in (then :func:`write_with_fallback` writes to the fallback).
    """
    try:
        os.mkdir(report_dir, 0o700)
    except OSError:
        pass  # there already (ours or another's), or the folder is not writable: checked next
    try:
        st = os.lstat(report_dir)
    except OSError as e:
        raise ReportWriteError(os.path.abspath(report_dir), e.strerror or str(e)) from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ReportWriteError(
            os.path.abspath(report_dir), "not used: a link, another user's folder, or writable by others"
        )
    parent = os.path.dirname(os.path.abspath(report_dir))
    try:
        mode = os.lstat(parent).st_mode
    except OSError:
        mode = 0o002
    # Anyone may rename entries of a world-writable folder unless it is sticky (safe_parent
    # looks at its owner only); a group-writable one is its owner's choice of users (umask 002).
    if (mode & 0o002 and not mode & stat.S_ISVTX) or not safe_parent(os.path.abspath(report_dir)):
        raise ReportWriteError(
            os.path.abspath(report_dir),
            "not used: another user can rename it (the working directory is not yours, or open to all and not sticky)",
        )


def sweep_stale(report_dir: str, older_than_s: float = STALE_TEMP_S) -> int:
    """Remove the hidden temporary folders of reports whose writer was killed (named as
    :func:`write` names them) from ``report_dir``: only real folders (``lstat``; never a link)
    of this user, unchanged for ``older_than_s`` seconds (:func:`_remove_flat`). Returns how
    many were removed; errors are ignored (a report still gets written).
    """
    try:
        dir_fd = os.open(report_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0
    removed = 0
    try:
        now = time.time()
        for name in os.listdir(dir_fd):
            if not _TEMP_NAME.match(name):
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or now - st.st_mtime < older_than_s:
                continue
            if _remove_flat(dir_fd, name, st):
                removed += 1
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return removed


def _remove_flat(dir_fd: int, name: str, seen: os.stat_result) -> bool:
    """Remove the folder ``name`` of ``dir_fd`` and the files in it (a temporary report folder
    holds files only), through descriptors: the folder opened ``O_NOFOLLOW`` and checked to be
    the one ``seen`` (same device and inode), its entries unlinked (unlink(2) never follows a
    link), then the folder removed. Returns whether it is gone; a folder in it is left, and so
    is the folder."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            return False
        for entry in os.listdir(fd):
            try:
                os.unlink(entry, dir_fd=fd)
            except OSError:
                pass
        os.rmdir(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def write(report: Report, report_dir: str) -> str:
    """Write ``report`` to ``<report_dir>/<report.folder_name>/`` and return that path. The
    temporary folders of earlier writes that were killed are swept first (:func:`sweep_stale`).

    Raises:
        ReportWriteError: the folder cannot be created or written (full disk, permission), or
            it is the default relative one and not safe to use (:func:`_default_dir_usable`);
            nothing partial is left behind.
    """
    if os.path.normpath(report_dir) == DEFAULT_DIR:
        _default_dir_usable(report_dir)
    try:
        os.makedirs(report_dir, mode=0o700, exist_ok=True)
        sweep_stale(report_dir)
        tmp = tempfile.mkdtemp(prefix=f".{report.folder_name}.", dir=report_dir)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise ReportWriteError(report_dir, getattr(e, "strerror", None) or str(e)) from None
    tmp_name, final_name = os.path.basename(tmp), report.folder_name
    dir_fd = tmp_fd = -1
    seen: Optional[os.stat_result] = None
    try:
        # The report_dir is opened once, and the new folder through it (O_NOFOLLOW): in a shared
        # report_dir another user may rename the folder away and leave a link in its place.
        dir_fd = os.open(report_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        tmp_fd = os.open(tmp_name, _DIR_FLAGS, dir_fd=dir_fd)
        seen = os.fstat(tmp_fd)
        if seen.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "the temporary folder was replaced by another user's")
        os.fchmod(tmp_fd, 0o700)
        _write_file("report.json", json.dumps(report.document, indent=1, default=str) + "\n", tmp_fd)
        _write_file("report.txt", report.text, tmp_fd)
        for name, text in report.raw_files:
            _write_file(name, text, tmp_fd)
        n = 1
        while _lexists(final_name, dir_fd):
            n += 1
            final_name = f"{report.folder_name}.{n}"
        os.rename(tmp_name, final_name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as e:
        if dir_fd >= 0 and seen is not None:
            _remove_flat(dir_fd, tmp_name, seen)
        elif dir_fd < 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise ReportWriteError(os.path.join(report_dir, final_name), e.strerror or str(e)) from None
    finally:
        for fd in (tmp_fd, dir_fd):
            if fd >= 0:
                os.close(fd)
    return os.path.join(report_dir, final_name)


def _lexists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


OUTCOME_FILE = "outcome.json"
# What the last `dlwatch verify` of a report concluded, in the report's folder (watchdog.commands.verify).
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
    created exclusively and renamed over ``path``, both through a descriptor of ``path``'s
    folder opened with ``O_NOFOLLOW``): a reader sees the old file or the new one.

    Raises:
        ReportWriteError: the file cannot be written (full disk, the folder gone); names
            ``path``'s folder.
    """
    folder, name = os.path.split(path)
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        dir_fd = os.open(folder or ".", _DIR_FLAGS)  # the report folder, never through a link
    except OSError as e:
        raise ReportWriteError(folder or ".", e.strerror or str(e)) from None
    try:
        if _lexists(tmp, dir_fd):
            os.unlink(tmp, dir_fd=dir_fd)
        _write_file(tmp, json.dumps(doc, indent=1, default=str) + "\n", dir_fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as e:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise ReportWriteError(folder or ".", e.strerror or str(e)) from None
    finally:
        os.close(dir_fd)


# The fallback folder's name in the temporary directory (``$TMPDIR``).
FALLBACK_NAME = DEFAULT_DIR


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
    if private_dir(path) is not None and safe_parent(path):
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
