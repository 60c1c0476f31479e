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
import sys
import sysconfig
import tempfile
from typing import Iterable, Iterator, List, Mapping, Optional

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
    started in any working directory imports this ``probes`` and ``watchdog``. Relative entries
    of ``base``'s ``PYTHONPATH`` (``""`` is the working directory) are dropped. Raises nothing."""
    env = dict(os.environ if base is None else base)
    first = [] if os.path.realpath(PACKAGE_ROOT) in _site_dirs() else [PACKAGE_ROOT]
    # A relative entry (an empty one is the working directory) would resolve in the child's
    # working directory: never kept from ``base``.
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
    parts = first + [p for p in extra if p] + inherited
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def python(*args: str, isolated: bool = False) -> List[str]:
    """The command line of a probe's Python child: ``sys.executable``, flags that keep the
    child's working directory and this user's site-packages off its ``sys.path``, then ``args``.

    With ``isolated``, ``-I`` (the child needs nothing from the environment: no ``PYTHON*``
    variable, no user site, neither the working directory nor a script's folder on
    ``sys.path``). Otherwise ``-s`` (no user site) and, from Python 3.11, ``-P`` (no working
    directory, for ``-c`` and ``-m``): ``PYTHONPATH`` still counts, so a child started with
    :func:`child_env` finds ``probes`` and ``watchdog``. Before 3.11 there is no ``-P``: start
    the child in a private folder (:func:`work_dir`), as every probe does, since the working
    directory may be one another user writes (``cd /tmp/x && dlwatch probe …`` as root must not
    import a ``torch.py`` planted there). Source: the Python documentation, "Command line and
    environment" (``-I``, ``-P``, ``-s``). Raises nothing."""
    if isolated:
        flags = ["-I"]
    else:
        flags = ["-s", "-P"] if sys.version_info >= (3, 11) else ["-s"]
    return [sys.executable, *flags, *args]


@contextlib.contextmanager
def work_dir(prefix: str = "dlwatch-probe-cwd-") -> Iterator[str]:
    """A new private folder (0700, ``tempfile.mkdtemp`` in the temporary directory) to be a
    child's working directory, removed with its contents when the block ends.

    Raises:
        OSError: the temporary directory cannot be written.
    """
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
