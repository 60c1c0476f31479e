"""The inside view's folder and the job's environment for its recorder.

``dlwatch run`` and ``dlwatch hook-env`` make a private folder (mode 0700) holding a random
token, and give the job an environment that puts ``watchdog/bootstrap`` first on its
``PYTHONPATH`` and names the folder (``DLWATCH_HOOK_DIR``) and the token; ``dlwatch attach``
takes a folder only from a job whose environment holds that folder's token, and removes only the
folder it made or accepted. The recorder's file format is the recorder module itself
(:data:`FORMAT`). The records are read by :class:`watchdog.collect.inside.InsideReader`.
"""

from __future__ import annotations

import errno
import hmac
import importlib.util
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional

from ..safefiles import private_dir, safe_parent

BOOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bootstrap")


def read_regular(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path``, opened without following a
    symbolic link and without blocking (the job writes this folder: a FIFO or a link to a device
    there must not hang or steer the sidecar, which may run as root).

    Raises:
        OSError: it cannot be opened, or is not a regular file (``EINVAL``).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _load_format():
    """The recorder module itself, loaded by path under a private name: one definition of the
    file format for writer and reader. It is standard-library only and does nothing on import."""
    spec = importlib.util.spec_from_file_location(
        "_dlwatch_inside_format", os.path.join(BOOT_DIR, "_dlwatch_inside.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {BOOT_DIR}/_dlwatch_inside.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORMAT = _load_format()


def hook_env(
    env: Mapping[str, str], folder: str, ancestor_pid: Optional[int], data_checks: bool = True
) -> Dict[str, str]:
    """``env`` with the bootstrap first on ``PYTHONPATH`` and the recorder's variables set.

    Args:
        env: the environment the job would get.
        folder: the private folder the job's processes write to.
        ancestor_pid: the pid whose descendants record (the watchdog's own); ``None``: every
            process that inherits the variables records (the opt-in for ``attach``).
        data_checks: ``False`` turns the recorder's data-correctness checks off.
    """
    out = dict(env)
    path = out.get("PYTHONPATH")
    out["PYTHONPATH"] = BOOT_DIR + (os.pathsep + path if path else "")
    out[FORMAT.ENV_DIR] = folder
    out.pop(TOKEN_ENV, None)
    token = _token_of(folder)
    if token:
        out[TOKEN_ENV] = token
    out.pop(FORMAT.ENV_ANCESTOR, None)
    out.pop(FORMAT.ENV_CHECKS, None)
    if not data_checks:
        out[FORMAT.ENV_CHECKS] = "0"
    if ancestor_pid is not None:
        out[FORMAT.ENV_ANCESTOR] = str(ancestor_pid)
    return out


# The job's proof that a hook folder is its own: ``make_folder`` writes a random token into the
# folder (TOKEN_FILE, 0600, in a 0700 folder) and ``hook_env`` gives it to the job; ``folder_of``
# takes a folder only from a job whose environment holds the same token. Another user's job can
# name any ``/tmp/dlwatch-hook-*`` it sees, but cannot read that folder's token.
TOKEN_ENV = "DLWATCH_HOOK_TOKEN"
TOKEN_FILE = ".token"


def _token_of(folder: str) -> Optional[str]:
    try:
        return read_regular(os.path.join(folder, TOKEN_FILE), 256).decode("ascii", "replace").strip() or None
    except OSError:
        return None


def _raw_environ(pid: int, names: Iterable[str]) -> Dict[str, str]:
    """The values of ``names`` in ``/proc/PID/environ``, unredacted (a token compared here,
    never written anywhere)."""
    wanted = {n.encode() for n in names}
    out: Dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return out
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in wanted:
            out[key.decode()] = os.fsdecode(value)
    return out


# ``tempfile.mkdtemp(prefix=HOOK_PREFIX)`` names: the prefix and eight of its random characters.
HOOK_PREFIX = "dlwatch-hook-"
_HOOK_NAME = re.compile(re.escape(HOOK_PREFIX) + r"[a-z0-9_]{8}\Z")


@dataclass(frozen=True)
class HookFolder:
    """A recorder folder and its identity when dlwatch made or accepted it: ``dev`` and
    ``ino`` of the directory (``lstat``). Only a folder that still has that identity is ever
    removed (:func:`remove_folder`)."""

    path: str
    dev: int
    ino: int


def is_hook_folder(path: str) -> bool:
    """Whether ``path`` is a folder ``dlwatch hook-env`` or ``dlwatch run`` could have made:
    named ``dlwatch-hook-XXXXXXXX``, a directory (not a link) of this user closed to others, in
    a folder nobody else may rename entries of."""
    return bool(_HOOK_NAME.match(os.path.basename(path))) and private_dir(path) is not None and safe_parent(path)


def folder_of(pid: int) -> Optional[HookFolder]:
    """The recorder folder a job started with ``env $(dlwatch hook-env) …`` names in its
    environment (``DLWATCH_HOOK_DIR`` in ``/proc/PID/environ``), or ``None`` unless it is one
    ``dlwatch hook-env`` made for this job: named ``dlwatch-hook-XXXXXXXX``, a directory (not a
    link) of this user closed to others, in a folder nobody else may rename entries of, whose
    token (``TOKEN_FILE``) the job's environment holds (``DLWATCH_HOOK_TOKEN``). The job
    controls its environment; this is what keeps it from pointing a root dlwatch at ``/root``
    or at another job's hook folder (which :func:`remove_folder` would then delete)."""
    env = _raw_environ(pid, (FORMAT.ENV_DIR, TOKEN_ENV))
    folder = env.get(FORMAT.ENV_DIR)
    if not folder or not os.path.isabs(folder) or not _HOOK_NAME.match(os.path.basename(folder)):
        return None
    for path in (folder, f"/proc/{pid}/root{folder}"):
        st = private_dir(path)
        if st is not None and safe_parent(path):
            token = _token_of(path)
            if token is None or not hmac.compare_digest(token, env.get(TOKEN_ENV, "")):
                return None  # not the folder made for this job
            return HookFolder(path, st.st_dev, st.st_ino)
    return None


def make_folder() -> HookFolder:
    """A new private folder (0700) for the recorder's files, in the temporary directory.

    Raises:
        OSError: the temporary directory cannot be written.
    """
    path = tempfile.mkdtemp(prefix=HOOK_PREFIX)
    fd = os.open(os.path.join(path, TOKEN_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secrets.token_hex(16))
    st = os.lstat(path)
    return HookFolder(path, st.st_dev, st.st_ino)


# How old (seconds since its last change) a hook folder holding nothing but its token must be
# before `dlwatch hook-env` sweeps it: made for a job that never started, or never recorded.
STALE_HOOK_S = 86400.0


def sweep_stale_folders(parent: Optional[str] = None, max_age_s: float = STALE_HOOK_S) -> List[str]:
    """Remove the hook folders ``dlwatch hook-env`` left in ``parent`` (default: the temporary
    directory ``make_folder`` uses) that hold nothing but their token and have not changed for
    ``max_age_s`` seconds; returns their paths. Only a directory named ``dlwatch-hook-XXXXXXXX``
    that is this user's and closed to others is touched (``lstat``, never through a link), in a
    parent nobody else may rename entries of (:func:`safe_parent`); it is opened once
    (``O_DIRECTORY|O_NOFOLLOW``), listed, its token file unlinked through that descriptor and
    then the folder removed with rmdir(2), which removes only an empty folder. A folder a job
    recorded into (files besides the token) is left for ``dlwatch attach`` to remove. Errors
    are ignored: nothing is removed then."""
    parent = parent or tempfile.gettempdir()
    if not safe_parent(os.path.join(parent, HOOK_PREFIX)):
        return []
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    now, removed = time.time(), []
    for name in names:
        path = os.path.join(parent, name)
        if not _HOOK_NAME.match(name):
            continue
        st = private_dir(path)
        if st is None or now - st.st_mtime < max_age_s:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != (st.st_dev, st.st_ino):
                continue
            entries = os.listdir(fd)
            if entries not in ([], [TOKEN_FILE]):
                continue
            if entries and not stat.S_ISREG(os.stat(TOKEN_FILE, dir_fd=fd, follow_symlinks=False).st_mode):
                continue
            if entries:
                os.unlink(TOKEN_FILE, dir_fd=fd)
            os.rmdir(path)
            removed.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def remove_folder(folder: HookFolder) -> bool:
    """Remove the recorder's folder and its files, only while ``folder.path`` still names the
    directory dlwatch made or accepted (same ``dev`` and ``ino``, not a link, still this
    user's and private); ``shutil.rmtree`` then removes it without following links (it works
    from directory descriptors where the platform allows: ``shutil.rmtree.avoids_symlink_attacks``).
    Returns whether it was removed; errors are ignored (it lives in /tmp)."""
    st = private_dir(folder.path)
    if st is None or (st.st_dev, st.st_ino) != (folder.dev, folder.ino):
        return False
    shutil.rmtree(folder.path, ignore_errors=True)
    return not os.path.lexists(folder.path)
