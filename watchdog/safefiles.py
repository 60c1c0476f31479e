"""Safe file creation: whether a folder dlwatch made, or one it would write into, is still its
own, and whether another local user could swap what a path names. A leaf: the recorder's
folders (:mod:`watchdog.collect.inside`) and the report folders (:mod:`watchdog.report.writer`)
both ask it. Standard library only; every check is on ``lstat`` (a link is never followed).

The rules relied on are POSIX's: only a directory's writers may rename or remove its entries,
and in a sticky directory only an entry's owner (or the directory's) may (unlink(2),
rename(2): ``EPERM`` "The directory containing pathname has the sticky bit set").
"""

from __future__ import annotations

import os
import stat
from typing import Optional


def private_dir(path: str) -> Optional[os.stat_result]:
    """``lstat`` of ``path`` when it is a directory (not a link) of this user closed to others
    (no group or other permission bits); ``None`` otherwise, or when it cannot be read."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
        return st
    return None


def safe_parent(path: str) -> bool:
    """Whether nobody else can swap what ``path`` names: its parent is a directory of this
    user's or root's that neither group nor others can write, or that has the sticky bit
    (``/tmp``: only an entry's owner may rename or remove it; unlink(2), rename(2)). A folder of
    this user's that others can write (0777 without the sticky bit) is not safe: anyone may
    rename what it holds. ``False`` when the parent cannot be read."""
    try:
        st = os.lstat(os.path.dirname(path) or ".")
    except OSError:
        return False
    closed = not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX)
    return stat.S_ISDIR(st.st_mode) and st.st_uid in (os.getuid(), 0) and closed
