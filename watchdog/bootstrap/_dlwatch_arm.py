"""Arms dlwatch's DataLoader recorder in a process of the watched job, and costs nothing else.

Imported by this folder's ``sitecustomize`` at every Python start-up under ``dlwatch run`` (or
``env $(dlwatch hook-env) …``), so it imports nothing beyond ``os`` and ``sys`` (loaded by
then): it checks that the process belongs to the job, then waits, as a ``sys.meta_path``
entry that never finds anything, for the job to import ``torch.utils.data.dataloader``; only
then is the recorder (``_dlwatch_inside``, with ``json``, ``mmap``, ``threading``) imported. A
process that never imports torch (a shell tool, a compiler, ``pip``) pays one environment
lookup and, under ``dlwatch run``, a walk up its parents in ``/proc``.

Standard library only: the job's Python may be another interpreter than dlwatch's.
"""

import os
import sys

ENV_DIR = "DLWATCH_HOOK_DIR"
ENV_ANCESTOR = "DLWATCH_HOOK_ANCESTOR"
TARGET = "torch.utils.data.dataloader"


def _descends_from(ancestor):
    pid = os.getpid()
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                stat = f.read()
        except OSError:
            return False
        pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return False


def _loaded():
    module = sys.modules.get(TARGET)
    if module is not None and hasattr(module, "_MultiProcessingDataLoaderIter") and hasattr(module, "DataLoader"):
        return module
    return None


def _start(folder, module):
    try:
        import _dlwatch_inside

        _dlwatch_inside.start(folder, module)
    except Exception:  # never let the recorder reach the job
        pass


class _Finder(object):
    """A ``sys.meta_path`` entry that never finds anything: each time the job imports a new
    module it checks whether ``torch.utils.data.dataloader`` has finished loading, starts the
    recorder, and leaves ``sys.meta_path``. (Wrapping the module's loader instead would put our
    frame in the traceback of any error raised while torch imports.)"""

    def __init__(self, folder):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):
        module = _loaded()
        if module is not None:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            _start(self.folder, module)
        return None

    def invalidate_caches(self):
        pass


def arm():
    """Arm the recorder in this process when it belongs to the watched job: ``$DLWATCH_HOOK_DIR``
    is a folder owned by this user and closed to others, and ``$DLWATCH_HOOK_ANCESTOR`` (the
    watchdog's pid, set by ``dlwatch run``) is an ancestor; without that variable (the opt-in
    ``env $(dlwatch hook-env) …`` for ``attach``) every process that has the folder records.
    Otherwise do nothing."""
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return
    if os.environ.get(ENV_ANCESTOR):
        try:
            ancestor = int(os.environ[ENV_ANCESTOR])
        except ValueError:
            return
        if not _descends_from(ancestor):
            return
    try:
        st = os.lstat(folder)
    except OSError:
        return
    if not (st.st_mode & 0o170000 == 0o040000) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return  # not a directory of this user closed to others (stat.S_ISDIR, without importing stat)
    module = _loaded()
    if module is not None:
        _start(folder, module)
    else:
        sys.meta_path.insert(0, _Finder(folder))
