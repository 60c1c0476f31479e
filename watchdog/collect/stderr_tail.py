"""Pass the job's stderr through to ours, byte for byte, keeping its last bytes for diagnosis
(PyTorch prints the cause of most DataLoader crashes there: "killed by signal", "Bus error",
"received 0 items of ancdata", pickling tracebacks of queue feeder threads).

The copying is done by a separate, tiny process (``python -m watchdog.collect.stderr_tail``,
:func:`pump`) in a session of its own, not by dlwatch: if dlwatch dies (``kill -9``, the OOM
killer), the job's stderr pipe keeps a reader and the job is unharmed; processes that outlive
the job keep writing until they close it. The pump keeps the last bytes in memory and
publishes them to a file (temporary file + rename) that dlwatch reads. If dlwatch is gone by
the time the stream ends (killed: its folders would stay in ``/tmp``), the pump removes its
own folder and the folders dlwatch named for it (the inside view's), since nobody else will.
If both are killed at once (``systemctl stop``, a test harness that kills every descendant),
the folder is swept by the next ``dlwatch run`` on the machine: each folder holds a ``lock``
file that dlwatch and the pump hold a ``flock(2)`` on for their lifetimes (one open file
description, inherited), so a folder whose lock can be taken has no live owner
(:func:`sweep_stale`).
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Sequence, Union

from .inside import is_hook_folder, read_regular

_PUBLISH_EVERY_S = 0.2
# Marks, in the tail's folder, that the pump saw the end of the stream and published it all.
_EOF = "eof"
_PREFIX = "dlwatch-stderr-"
_LOCK = "lock"
# Lists, in the tail's folder, the folders the pump would remove with it (the inside view's):
# a sweep that finds the folder stale removes them too (dlwatch and the pump killed together).
_ORPHANS = "orphans"
# A folder without a lock file is left alone this long (it may be being made right now).
_UNLOCKED_GRACE_S = 3600.0


def _owned_lock_free(folder: str) -> Optional[bool]:
    """Whether ``folder`` (a directory of this user, checked by the caller) has a ``lock`` file
    whose ``flock`` can be taken now (``True``: no live owner), is held (``False``), or has
    none (``None``). The lock is opened without following a link and without blocking, and only
    a regular file of this user counts: anything else another user or the job put there
    (a FIFO, a link to a device) is never waited on."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fd = os.open(_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                return False
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def sweep_stale(tmpdir: str) -> int:
    """Remove the ``dlwatch-stderr-*`` folders under ``tmpdir`` that no live dlwatch or pump
    owns: their ``lock`` file's ``flock`` can be taken (the kernel drops a flock when the last
    descriptor of its open file description closes, so a killed owner holds none: flock(2)).
    Folders without a lock file are removed only when older than an hour. Only real
    directories of this user are looked into (``lstat`` first: another user's folder, a link or
    a FIFO named like ours is skipped, and nothing there is ever waited on). Returns how many
    were removed; never raises."""
    removed = 0
    for folder in glob.glob(os.path.join(glob.escape(tmpdir), _PREFIX + "*")):
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        free = _owned_lock_free(folder)
        stale = free if free is not None else time.time() - st.st_mtime > _UNLOCKED_GRACE_S
        if stale:
            for other in _orphans_of(folder):
                shutil.rmtree(other, ignore_errors=True)
            shutil.rmtree(folder, ignore_errors=True)  # no link followed (shutil.rmtree.avoids_symlink_attacks)
            removed += not os.path.lexists(folder)
    return removed


def _orphans_of(folder: str) -> List[str]:
    """The hook folders a stale tail folder names in its ``orphans`` file that are still what
    dlwatch made (``dlwatch-hook-XXXXXXXX``, a private directory of this user in a safe
    parent: :func:`watchdog.collect.inside.folder_of`'s test); anything else is left alone."""
    try:
        names = read_regular(os.path.join(folder, _ORPHANS), 1 << 16).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return [p for p in names if os.path.isabs(p) and is_hook_folder(p)]


# fcntl.F_SETPIPE_SZ (Linux, Python >= 3.10 names it): a pipe's capacity.
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
# The pipe capacity asked for and the read size: 1 MiB, the default /proc/sys/fs/pipe-max-size
# an unprivileged process may set (pipe(7)). A job writing 1 GiB to stderr then costs 1024
# reads and writes instead of 16384.
_PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> int:
    """Ask for a 1 MiB capacity of the pipe ``fd`` (a pipe holds 64 KiB by default); the read
    size that goes with what was granted."""
    try:
        return max(65536, fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES))
    except OSError:  # not a pipe, or above the limit: the default
        return 65536


def pump(src_fd: int, dst_fd: int, tail_path: str, limit_bytes: int) -> None:
    """Copy ``src_fd`` to ``dst_fd`` until EOF, publishing the last ``limit_bytes`` bytes to
    ``tail_path`` at most every 0.2 s, within 0.2 s of the stream pausing, and at EOF. A write
    error on ``dst_fd`` (a closed terminal) stops forwarding but not draining, so writers never
    block or get SIGPIPE."""
    buf = bytearray()
    forward, dirty, last = True, False, 0.0
    chunk_size = _widen_pipe(src_fd)
    while True:
        if dirty:  # publish what arrived once the stream pauses, not only when more arrives
            try:
                ready, _, _ = select.select([src_fd], [], [], max(0.0, last + _PUBLISH_EVERY_S - time.monotonic()))
            except InterruptedError:
                continue
            if not ready:
                _publish(tail_path, buf)
                dirty, last = False, time.monotonic()
                continue
        try:
            chunk = os.read(src_fd, chunk_size)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        if forward:
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst_fd, view) :]
            except OSError:
                forward = False
        if len(chunk) >= limit_bytes:
            buf[:] = chunk[len(chunk) - limit_bytes :]
        else:
            buf += chunk
            if len(buf) > limit_bytes:
                del buf[: len(buf) - limit_bytes]
        dirty = True
        now = time.monotonic()
        if now - last >= _PUBLISH_EVERY_S:
            _publish(tail_path, buf)
            dirty, last = False, now
    if dirty or not os.path.exists(tail_path):
        _publish(tail_path, buf)


_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?", re.M)


def without_rank_prefixes(text: str) -> str:
    """``text`` without the ``[rank1]: `` that torchrun puts before each line a rank prints
    (``--tee``/``--log-dir`` and torch >= 2.2's default redirects), so that PyTorch's own
    messages and tracebacks read as they do in a single process."""
    return _RANK_PREFIX.sub("", text)


def _publish(path: str, data: Union[bytes, bytearray]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


class StderrTail:
    """Starts the pump for a job's stderr.

    Use :attr:`job_stderr` as the job's stderr (then :meth:`close_job_end`), :meth:`text` for
    the kept tail, and :meth:`wait` after the job ends.

    Args:
        dst_fd: where the bytes go (our stderr).
        limit_bytes: how many trailing bytes to keep.
        orphan_cleanup: folders the pump removes, with its own, if dlwatch is gone when the
            job's stderr ends.

    Raises:
        OSError: the pipe, the temporary folder or the pump process cannot be made.
    """

    def __init__(self, dst_fd: int, limit_bytes: int, orphan_cleanup: Sequence[str] = ()) -> None:
        sweep_stale(tempfile.gettempdir())
        self._dir = tempfile.mkdtemp(prefix=_PREFIX)
        self.tail_path = os.path.join(self._dir, "tail")
        # Held by us and (inherited) by the pump until both are gone: see sweep_stale.
        lock_fd = os.open(os.path.join(self._dir, _LOCK), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._lock_fd: Optional[int] = lock_fd
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        with open(os.path.join(self._dir, _ORPHANS), "x", encoding="utf-8") as f:
            f.write("".join(f"{p}\n" for p in orphan_cleanup))
        read_fd, self.job_stderr = os.pipe()
        try:
            self._proc = subprocess.Popen(
                # -I: not the job's PYTHONPATH (its sitecustomize, the inside view's bootstrap)
                # nor the user's site; dlwatch's own installation is all it needs.
                [
                    sys.executable,
                    "-I",
                    "-m",
                    "watchdog.collect.stderr_tail",
                    self.tail_path,
                    str(limit_bytes),
                    str(os.getpid()),
                    *orphan_cleanup,
                ],
                stdin=read_fd,
                stdout=dst_fd,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # outlives dlwatch; no terminal signals
                close_fds=True,
                pass_fds=(lock_fd,),
            )
        except BaseException:
            self.cleanup()
            os.close(self.job_stderr)
            raise
        finally:
            os.close(read_fd)

    def close_job_end(self) -> None:
        """Close our copy of the job's end of the pipe (after the job was started)."""
        try:
            os.close(self.job_stderr)
        except OSError:
            pass

    def text(self) -> str:
        """The kept tail as last published (UTF-8, invalid bytes replaced, torchrun's rank
        prefixes removed: :func:`without_rank_prefixes`); may lag 0.2 s."""
        try:
            with open(self.tail_path, "rb") as f:
                return without_rank_prefixes(f.read().decode("utf-8", "replace"))
        except OSError:
            return ""

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the pump to reach the end of the job's stderr and
        publish the whole tail (processes that outlive the job may hold the pipe open: then the
        pump goes on alone and the tail so far is used). Returns whether it did."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(self._dir, _EOF)) or self._proc.poll() is not None:
                return True
            time.sleep(0.05)
        return False

    def cleanup(self) -> None:
        """Remove the tail's folder; the pump, which waits for that after the end of the
        stream, then exits (or exits at the end of the stream, if that comes later)."""
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def main(argv: Sequence[str]) -> None:
    """``python -m watchdog.collect.stderr_tail TAIL_PATH LIMIT DLWATCH_PID [FOLDER …]``: pump
    stdin to stdout; at EOF mark the tail complete, then wait until dlwatch removes TAIL_PATH's
    folder, or dies first (this process is then no longer its child; the pid is passed, not
    read at start, since dlwatch may die before this interpreter starts): then remove that
    folder and each FOLDER, since nobody else will."""
    parent = int(argv[2])
    folder = os.path.dirname(argv[0])
    pump(0, 1, argv[0], int(argv[1]))
    try:
        open(os.path.join(folder, _EOF), "wb").close()
    except OSError:
        pass
    while os.path.isdir(folder):
        if os.getppid() != parent:  # dlwatch died: reparented
            for path in [folder, *argv[3:]]:
                shutil.rmtree(path, ignore_errors=True)
            return
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1:])
