"""Where the probes' child processes find their modules, whatever their working directory.

The probes start Python children by module name (``python -m watchdog``, ``python -m
probes.train``, ``python -m probes.bench.child``; ``watchdog.probes.…`` once installed, see
:func:`probes.module_name`). Those names resolve from the child's ``sys.path``: from the folder
that holds this package when it runs from a source tree (with or without an editable install),
from site-packages after ``pip install .``. :func:`child_env`
makes that hold in a child started in any folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import sysconfig
import tempfile
from typing import Iterable, Iterator, Mapping, Optional

# The folder from which this package's name resolves (``probes`` and ``watchdog`` beside it in a
# source tree: the repository root; ``watchdog.probes`` once installed: site-packages).
PACKAGE_ROOT = os.path.abspath(__file__)
for _ in range(__name__.count(".") + 1):  # "probes.env": two folders up; "watchdog.probes.env": three
    PACKAGE_ROOT = os.path.dirname(PACKAGE_ROOT)


def _site_dirs() -> set:
    dirs = set()
    for key in ("purelib", "platlib"):
        try:
            dirs.add(os.path.realpath(sysconfig.get_paths()[key]))
        except (KeyError, OSError):
            pass
    try:
        dirs.update(os.path.realpath(d) for d in site.getsitepackages())
    except AttributeError:  # virtualenv's old site.py
        pass
    try:
        dirs.add(os.path.realpath(site.getusersitepackages()))
    except AttributeError:
        pass
    return dirs


def child_env(base: Optional[Mapping[str, str]] = None, extra: Iterable[str] = ()) -> dict:
    """A copy of ``base`` (default ``os.environ``) whose ``PYTHONPATH`` starts with
    :data:`PACKAGE_ROOT` (unless it is a site-packages folder, already on every interpreter's
    path and best left after the standard library) and then the folders in ``extra``, so a child
    started in any working directory imports this ``probes`` and ``watchdog``. Raises nothing."""
    env = dict(os.environ if base is None else base)
    first = [] if os.path.realpath(PACKAGE_ROOT) in _site_dirs() else [PACKAGE_ROOT]
    parts = first + [p for p in extra if p] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


# unix(7): sun_path holds 108 bytes, the terminating NUL included.
_SUN_PATH_BYTES = 108
# "/dlwatch-probe-" and mkdtemp's 8 random characters.
_PRIVATE_NAME_BYTES = len("/dlwatch-probe-") + 8
# multiprocessing's socket below TMPDIR: "/pymp-XXXXXXXX/listener-XXXXXXXX"
# (multiprocessing.util.get_temp_dir, multiprocessing.connection.arbitrary_address).
_SOCKET_TAIL_BYTES = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


@contextlib.contextmanager
def private_tmpdir() -> Iterator[Optional[str]]:
    """Make ``TMPDIR`` a new private folder (``dlwatch-probe-*`` in the current one) for this
    probe and every process it starts, and remove it, with whatever they left there, when the
    block ends, however it ends short of SIGKILL. Jobs that a probe kills (SIGKILL to their
    process group) clean up nothing: multiprocessing's ``pymp-*`` folders
    (``multiprocessing.util.get_temp_dir``), ``probes.train``'s sample files, ``dlwatch``'s
    stderr folders. Yields the folder's path, or ``None`` (and changes nothing) when it cannot
    be created, or when ``TMPDIR`` is so long that the jobs' AF_UNIX sockets in it (PyTorch's
    ``file_descriptor`` sharing strategy passes descriptors through multiprocessing's
    ``pymp-*/listener-*`` sockets) would pass the 108 bytes of ``sun_path``, unix(7), one level
    deeper: the probe then runs as before. Raises nothing of its own.
    """
    before_env, before_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + _PRIVATE_NAME_BYTES + _SOCKET_TAIL_BYTES >= _SUN_PATH_BYTES:
        yield None  # one level deeper, the jobs' AF_UNIX sockets would not fit: change nothing
        return
    try:
        folder = tempfile.mkdtemp(prefix="dlwatch-probe-", dir=base)
    except OSError:
        yield None
        return
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder
    try:
        yield folder
    finally:
        if before_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before_env
        tempfile.tempdir = before_tempdir
        shutil.rmtree(folder, ignore_errors=True)
