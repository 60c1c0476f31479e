"""The probes' output files (``--json``, ``--csv``): written so that a link or a file another user
planted at the path, or at a temporary name beside it, is never written through.

A probe may run as root in a folder other users write (``/tmp``, a shared project folder): a
plain ``open(path + ".tmp", "w")`` follows a symbolic link planted there and truncates its
target. :func:`write_text` opens the destination's folder once (``O_NOFOLLOW``), creates a
temporary file in it exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``, openat(2)) and renames it over
the destination (renameat(2)): a link at the destination is replaced, never followed.
"""

from __future__ import annotations

import os
import secrets

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` as :func:`write_bytes` does. A character UTF-8 cannot
    encode (a surrogate) is written as its ``\\udcNN`` escape.

    Raises:
        OSError: as :func:`write_bytes`.
    """
    write_bytes(path, text.encode("utf-8", "backslashreplace"))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a reader sees the old file or the new one. The new
    file's mode is 0666 less the umask, as ``open(path, "w")`` makes it.

    Raises:
        OSError: the folder cannot be opened (or is a link), or the file cannot be written
            (full disk, permission); nothing is left behind at the temporary name.
    """
    folder, name = os.path.split(path)
    if not name:
        raise IsADirectoryError(21, "is a directory", path)
    dir_fd = os.open(folder or ".", _DIR_FLAGS)
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, _FILE_FLAGS, 0o666, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    finally:
        os.close(dir_fd)
