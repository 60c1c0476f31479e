"""Where the probes' child processes find their modules, whatever their working directory.

The probes start Python children by module name (``python -m watchdog``, ``python -m
probes.train``, ``python -m probes.bench.child``). Those names resolve from the child's
``sys.path``: from the folder that holds this package when it runs from a source tree (with or
without an editable install), from site-packages after ``pip install .``. :func:`child_env`
makes that hold in a child started in any folder.
"""

from __future__ import annotations

import os
import site
import sysconfig
from typing import Iterable, Mapping, Optional

# The folder that holds the ``probes`` package (and ``watchdog`` beside it): the repository
# root in a source tree, site-packages after a non-editable install.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
