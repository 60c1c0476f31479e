"""The one reviewable table of names the watchdog recognises in stacks, threads and wchan.

PyTorch renames its internals between versions (newer main has ``_process_worker_loop`` and
``_base_worker_loop`` after thread-based workers, pytorch/pytorch#161044), so every check
matches a table of names, never one. Sources: ``torch/utils/data/dataloader.py``
(``_MultiProcessingDataLoaderIter``), ``torch/utils/data/_utils/worker.py`` (``_worker_loop``),
``torch/utils/data/_utils/pin_memory.py`` (``_pin_memory_loop``), CPython ``Modules/_threadmodule.c``
and ``Python/thread_pthread.h`` (lock acquisition), glibc (``pthread_mutex_lock``).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from .types import Frame, ThreadStack

# Lines above a user frame's line read with a hang's stacks (watchdog.watch.hang_look), where
# the rules look for the ``with LOCK:`` or ``LOCK.acquire()`` that holds a lock around it
# (watchdog.diagnose.hangs.holds_at) and the non-blocking get a worker spins on
# (watchdog.diagnose.dead).
ENCLOSING_LINES = 20

# ``MP_STATUS_CHECK_INTERVAL`` in torch/utils/data/_utils/__init__.py: waiting loader loops
# (main's _try_get_data, an idle worker's index_queue.get, the pin thread) wake this often.
MP_STATUS_CHECK_INTERVAL_S = 5.0

# Process and thread names set by PyTorch >= 2.5 (pytorch/pytorch#128448).
WORKER_COMMS = frozenset({"pt_data_worker", "pt_multiprocess_data_worker"})
PIN_THREAD_COMMS = frozenset({"pt_data_pin"})
MAIN_COMMS = frozenset({"pt_main_thread"})

DATALOADER_FILE = "torch/utils/data/dataloader.py"
WORKER_FILE = "torch/utils/data/_utils/worker.py"

# Main's iterating thread waiting for a batch, in dataloader.py.
LOADER_WAIT_FUNCS = frozenset({"_try_get_data", "_get_data"})
LOADER_NEXT_FUNCS = frozenset({"__next__", "_next_data"})
# Main shutting the iterator down (dataloader.py).
LOADER_SHUTDOWN_FUNCS = frozenset({"_shutdown_workers", "__del__"})
# A worker's main loop (worker.py).
WORKER_LOOP_FUNCS = frozenset({"_worker_loop", "_process_worker_loop", "_base_worker_loop"})
# A worker fetching a batch from the Dataset (torch/utils/data/_utils/fetch.py).
FETCH_FUNCS = frozenset({"fetch"})
# Pin-memory thread (pin_memory.py): its loop, and the work of pinning one batch.
PIN_MEMORY_FILE = "torch/utils/data/_utils/pin_memory.py"
PIN_LOOP_FUNCS = frozenset({"_pin_memory_loop", "do_one_step"})
PIN_WORK_FUNCS = frozenset({"pin_memory"})
# torch.distributed collectives and rendezvous (torch/distributed/distributed_c10d.py, rendezvous.py).
COLLECTIVE_FUNCS = frozenset(
    {
        "barrier",
        "monitored_barrier",
        "all_reduce",
        "all_gather",
        "all_gather_object",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "reduce_scatter",
        "all_to_all",
        "gather",
        "scatter",
        "wait",
        "init_process_group",
        "_store_based_barrier",
        "rendezvous",
    }
)
# Wait-channel families of a task blocked in file-system or pipe code.
IO_WCHAN_FAMILIES = frozenset({"disk_or_network_fs", "fifo_open", "pipe"})

# CPython's own lock acquisition (Modules/_threadmodule.c, Python/thread_pthread.h).
CPYTHON_LOCK_NATIVE = frozenset(
    {
        "lock_PyThread_acquire_lock",
        "rlock_acquire",
        "PyThread_acquire_lock_timed",
        "acquire_timed",
        "_PyMutex_LockTimed",
        "_PyMutex_LockSlow",
        "_PySemaphore_Wait",
        "PyMutex_Lock",
    }
)
# Native frames of a thread blocked acquiring a lock: OpenMP runtimes, CPython's lock (3.11/3.12
# and the 3.13+ PyMutex/parking lot), glibc's mutex and semaphore waits.
LOCK_ACQUIRE_NATIVE = CPYTHON_LOCK_NATIVE | frozenset(
    {
        # GNU OpenMP (libgomp) and Intel OpenMP (libiomp5) waits inherited across fork (B02, B03).
        "gomp_mutex_lock_slow",
        "gomp_team_barrier_wait_end",
        "gomp_barrier_wait_end",
        "gomp_sem_wait_slow",
        "__kmp_acquire_queuing_lock",
        "__kmp_suspend_64",
        "__kmp_wait_template",
        "pthread_mutex_lock",
        "___pthread_mutex_lock",
        "__pthread_mutex_lock",
        "__lll_lock_wait",
        "__lll_lock_wait_private",
        "pthread_rwlock_rdlock",
        "pthread_rwlock_wrlock",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "__new_sem_wait_slow64",
        "do_futex_wait",
    }
)
# A source line that takes a lock: ``x.acquire(`` or ``with <expr naming a lock>:``.
_ACQUIRE_CALL = re.compile(r"\.acquire\s*\(")
_WITH_EXPR = re.compile(r"^\s*(?:async\s+)?with\s+(?P<expr>.+?):\s*$")
_LOCK_WORDS = frozenset({"lock", "rlock", "mutex", "semaphore", "sem", "boundedsemaphore"})

# Kernel wait channels by family (Linux 6.18 names first; older kernels' names after).
WCHAN_FAMILIES = {
    "futex": ("futex_do_wait", "futex_wait_queue", "futex_wait_queue_me", "futex_wait"),
    "poll": ("poll_schedule_timeout", "do_sys_poll", "do_select", "ep_poll"),
    "sleep": ("hrtimer_nanosleep", "do_nanosleep", "clock_nanosleep"),
    "pipe": ("anon_pipe_read", "anon_pipe_write", "pipe_read", "pipe_write", "pipe_wait"),
    "fifo_open": ("wait_for_partner",),
    "socket": ("sk_wait_data", "wait_woken", "inet_csk_accept", "unix_stream_read_generic"),
    "wait_child": ("do_wait",),
    "disk_or_network_fs": (
        "rpc_wait_bit_killable",
        "nfs_",
        "folio_wait_bit_common",
        "io_schedule",
        "request_wait_answer",
        "fuse_",
        "wait_on_page_bit",
    ),
}


def wchan_family(wchan: Optional[str]) -> Optional[str]:
    """The family (a key of ``WCHAN_FAMILIES``) of a kernel wait channel name, or ``None``.

    ``"0"`` or empty (running, or unreadable without permission) gives ``None``.
    """
    if not wchan or wchan == "0":
        return None
    for family, names in WCHAN_FAMILIES.items():
        if any(wchan.startswith(n) for n in names):
            return family
    return None


def is_collective(frame: Frame) -> bool:
    """True for a frame of a torch.distributed collective or rendezvous."""
    return "torch/distributed/" in normalise_path(frame.file) and frame.function.rsplit(".", 1)[-1] in COLLECTIVE_FUNCS


def normalise_path(path: str) -> str:
    """``path`` with backslashes turned to slashes, for suffix matching of library files."""
    return path.replace("\\", "/")


def _func_name(frame: Frame) -> str:
    # py-spy qualifies methods: "_MultiProcessingDataLoaderIter._try_get_data".
    return frame.function.rsplit(".", 1)[-1]


def frame_in(frame: Frame, funcs: Iterable[str], file_suffix: Optional[str] = None) -> bool:
    """True when ``frame``'s bare function name is in ``funcs`` (and its file ends with
    ``file_suffix`` when given)."""
    if _func_name(frame) not in funcs:
        return False
    return file_suffix is None or normalise_path(frame.file).endswith(file_suffix)


def is_stdlib(frame: Frame) -> bool:
    """True for frames of the Python standard library (``<frozen …>`` included)."""
    path = normalise_path(frame.file)
    if path.startswith("<"):
        return True
    return bool(re.search(r"/lib/python3[.\d]*/", path)) and "-packages/" not in path


def is_torch(frame: Frame) -> bool:
    """True for frames of PyTorch itself."""
    return "/torch/" in normalise_path(frame.file) or normalise_path(frame.file).startswith("torch/")


def is_user(frame: Frame) -> bool:
    """True for a Python frame of the user's code: neither native, nor the standard library,
    nor PyTorch (third-party libraries count as the user's: they were called from it)."""
    return not frame.native and not is_stdlib(frame) and not is_torch(frame)


def python_frames(thread: ThreadStack) -> tuple:
    """The thread's Python frames, innermost first."""
    return tuple(f for f in thread.frames if not f.native)


def innermost_python(thread: ThreadStack) -> Optional[Frame]:
    """The innermost Python frame of ``thread``, or ``None``."""
    frames = python_frames(thread)
    return frames[0] if frames else None


# The source files of compiled extension modules (Cython's .pyx/.pxd/.pxi): a traceback or a
# stack names them by the relative path the module was compiled from ("numpy/random/_mt19937.pyx",
# "_mt19937.pyx"), never by where the job keeps its own code.
_COMPILED_SOURCE = (".pyx", ".pxd", ".pxi")


def is_third_party(frame: Frame) -> bool:
    """True for a frame of an installed package (``site-packages``/``dist-packages``), or of a
    compiled module, named by the relative path of its source (``numpy/random/_mt19937.pyx``)."""
    path = normalise_path(frame.file)
    if "-packages/" in path:
        return True
    return path.endswith(_COMPILED_SOURCE)


def innermost_user(thread: ThreadStack) -> Optional[Frame]:
    """The innermost frame of the job's own files in ``thread`` (not the standard library, not
    PyTorch, not an installed package); else the innermost frame of an installed package it
    called; ``None`` when there is neither. This is a report's ``where``: the line a user can
    change (a site-packages frame is where the library waited, not where the job asked it to)."""
    library = None
    for f in thread.frames:
        if is_user(f):
            if not is_third_party(f):
                return f
            library = library or f
    return library


def has_frame(thread: ThreadStack, funcs: Iterable[str], file_suffix: Optional[str] = None) -> bool:
    """True when any frame of ``thread`` matches (see :func:`frame_in`)."""
    funcs = frozenset(funcs)
    return any(frame_in(f, funcs, file_suffix) for f in thread.frames)


def native_lock_frame(thread: ThreadStack) -> Optional[Frame]:
    """The native lock-acquire frame on top of ``thread``'s innermost Python frame, if any.

    Only native frames above (inner to) the first Python frame count: a lock taken deeper in
    the stack is not what the thread waits on now.
    """
    for f in thread.frames:
        if not f.native:
            return None
        if f.function in LOCK_ACQUIRE_NATIVE or f.function.split("@")[0] in LOCK_ACQUIRE_NATIVE:
            return f
    return None


# Native libraries of OpenMP runtimes: GNU (libgomp), Intel (libiomp5), LLVM (libomp). Their
# thread pools do not survive fork (pytorch/pytorch#17199, #41197).
OPENMP_MODULES = ("libgomp", "libiomp", "libomp")
# Python-level waits for a notification from another thread (threading.py, queue.py,
# concurrent/futures/_base.py).
_NOTIFY_WAITS = {
    "Future.result": "future",
    "Condition.wait": "condition",
    "Event.wait": "condition",
    "Barrier.wait": "condition",
    "Semaphore.acquire": "condition",
    "Thread.join": "join",
    "Thread._wait_for_tstate_lock": "join",
}


def _top_native(thread: ThreadStack) -> list:
    out = []
    for f in thread.frames:
        if not f.native:
            break
        out.append(f)
    return out


def lock_holder(thread: ThreadStack, source: Optional[str] = None) -> Optional[str]:
    """What kind of thing ``thread`` waits to acquire, from its frames: ``openmp`` (an OpenMP
    runtime's native frames on top), ``join`` (``Thread.join``), ``future`` (a
    ``concurrent.futures`` result), ``condition`` (a ``threading`` Condition, Event, Semaphore
    or a ``queue.Queue``), ``native_mutex`` (glibc's mutex or semaphore), ``python_lock`` (CPython's
    lock, or a source line that takes one), or ``None``. ``source`` is the innermost Python
    frame's source line, when known."""
    top = _top_native(thread)
    if any(
        any(m in (f.module or f.file) for m in OPENMP_MODULES) or f.function.startswith(("gomp_", "__kmp_"))
        for f in top
    ):
        return "openmp"
    py = python_frames(thread)[:4]
    kinds = [_NOTIFY_WAITS.get(f.function) for f in py]
    for kind in ("future", "join"):  # the outer, more specific wait names what is awaited
        if kind in kinds:
            return kind
    if "condition" in kinds or any(
        f.function.rsplit(".", 1)[-1] in ("get", "put") and normalise_path(f.file).endswith("/queue.py") for f in py
    ):
        return "condition"
    names = {f.function.split("@")[0] for f in top}
    if names & CPYTHON_LOCK_NATIVE:
        return "python_lock"
    if names & LOCK_ACQUIRE_NATIVE:
        return "native_mutex"
    if line_takes_lock(source):
        return "python_lock"
    return None


def _is_lock_name(word: str) -> bool:
    w = word.lower().strip("_")
    return (
        w in _LOCK_WORDS
        or w.endswith("_lock")
        or w.startswith("lock_")
        or w.endswith("mutex")
        or (w.endswith("lock") and not w.endswith("block"))
    )


def line_takes_lock(source: Optional[str]) -> bool:
    """True when a source line acquires a lock: ``x.acquire(``, or ``with`` on an expression
    whose names say lock/mutex/semaphore (``with self._lock:``, ``with LOCK:``). Comments and
    string literals are ignored."""
    if not source:
        return False
    code = re.sub(r"(\"[^\"]*\"|'[^']*')", "''", source).split("#", 1)[0]
    if _ACQUIRE_CALL.search(code):
        return True
    m = _WITH_EXPR.match(code)
    return m is not None and any(_is_lock_name(w) for w in re.findall(r"[A-Za-z_]\w*", m.group("expr")))


def is_worker_stack(stack_threads: Iterable[ThreadStack]) -> bool:
    """True when any thread runs PyTorch's worker loop (``_worker_loop`` in worker.py)."""
    return any(has_frame(t, WORKER_LOOP_FUNCS) for t in stack_threads)


def worker_loop_thread(stack_threads: Iterable[ThreadStack]) -> Optional[ThreadStack]:
    """The thread running the worker loop, or ``None``."""
    for t in stack_threads:
        if has_frame(t, WORKER_LOOP_FUNCS):
            return t
    return None


def is_idle_worker(thread: ThreadStack) -> bool:
    """True when a worker-loop thread waits for its next index: ``Queue.get`` called directly by
    the worker loop (``index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)`` in worker.py), i.e.
    healthy-idle. A ``Queue.get`` called from the Dataset is the user's wait, not this one."""
    py = python_frames(thread)
    for i, f in enumerate(py):
        if frame_in(f, WORKER_LOOP_FUNCS) or frame_in(f, FETCH_FUNCS) or is_user(f):
            return False
        if f.function.endswith("Queue.get") and i + 1 < len(py) and frame_in(py[i + 1], WORKER_LOOP_FUNCS):
            return True
    return False


def waits_in_user_code(thread: ThreadStack) -> Optional[Frame]:
    """The user's frame that is waiting, when the innermost Python frame that is not the standard
    library belongs to the user (``time.sleep`` or a socket's ``recv`` called from
    ``__getitem__``), or ``None`` (a wait in PyTorch's code, such as ``_shutdown_workers``
    joining a worker, is PyTorch's even though the user's loop is further down)."""
    for f in python_frames(thread):
        if is_stdlib(f):
            continue
        return f if is_user(f) else None
    return None


def innermost_user_above(thread: ThreadStack, depth: int) -> Optional[Frame]:
    """The innermost frame of the user's code among the ``depth`` innermost frames, or ``None``."""
    return next((f for f in thread.frames[:depth] if is_user(f)), None)


def loader_wait_depth(thread: ThreadStack) -> Optional[int]:
    """Index of the DataLoader wait frame (``_try_get_data``/``_get_data`` under ``__next__``
    in dataloader.py) in ``thread``, or ``None`` when the thread is not waiting for a batch."""
    wait_at = None
    for i, f in enumerate(thread.frames):
        if wait_at is None and frame_in(f, LOADER_WAIT_FUNCS, DATALOADER_FILE):
            wait_at = i
        elif wait_at is not None and frame_in(f, LOADER_NEXT_FUNCS, DATALOADER_FILE):
            return wait_at
    return None


def manager_call(thread: ThreadStack) -> Optional[str]:
    """The method a thread waits on through a ``multiprocessing.Manager`` proxy, or ``None``:
    its innermost Python frames, above the user's code, run ``BaseProxy._callmethod`` in
    multiprocessing/managers.py (it sends the request to the manager process and reads its reply);
    the method is the proxy frame that called it (``acquire``, ``get``, ``wait``, ``__enter__``:
    ``AcquirerProxy``'s, or one ``MakeProxyType`` wrote, whose file is ``<string>``)."""
    py = python_frames(thread)
    for i, f in enumerate(py):
        if is_user(f) and f.file != "<string>":
            return None
        if f.function.endswith("_callmethod") and normalise_path(f.file).endswith("multiprocessing/managers.py"):
            caller = py[i + 1] if i + 1 < len(py) else None
            return caller.function.rsplit(".", 1)[-1] if caller is not None else "?"
    return None


def waits_on_mp_queue(thread: ThreadStack) -> bool:
    """True when the thread's innermost Python frames, above the user's code, read a
    multiprocessing queue or connection (``Queue.get`` in multiprocessing/queues.py,
    ``Connection.recv*`` in multiprocessing/connection.py): a wait for another process to send.
    A ``multiprocessing.Manager`` proxy's call reads a connection too, but from the manager
    process, which answers every call it can (:func:`manager_call`): never a queue."""
    if manager_call(thread) is not None:
        return False
    for f in python_frames(thread):
        if is_user(f):
            return False
        path = normalise_path(f.file)
        if path.endswith(("multiprocessing/queues.py", "multiprocessing/connection.py")):
            return True
    return False


# multiprocessing's synchronization primitives (multiprocessing/synchronize.py), by class.
_MP_SYNC = {
    "Event": "event",
    "Lock": "lock",
    "RLock": "lock",
    "Semaphore": "semaphore",
    "BoundedSemaphore": "semaphore",
    "Condition": "condition",
    "Barrier": "barrier",
}


def mp_sync_wait(thread: ThreadStack) -> Optional[str]:
    """What multiprocessing primitive the thread's innermost Python frames, above the user's
    code, wait on (``Event.wait``, ``Lock.acquire``/``__enter__``, … in
    multiprocessing/synchronize.py): ``event``, ``lock``, ``semaphore``, ``condition`` or
    ``barrier``; ``None`` when none."""
    found = None
    for f in python_frames(thread):
        if is_user(f):
            break
        if normalise_path(f.file).endswith("multiprocessing/synchronize.py"):
            head = f.function.split(".")[0]
            found = _MP_SYNC.get(head, found)
    return found


def is_resource_sharer(thread: ThreadStack) -> bool:
    """True for multiprocessing's resource-sharer thread (``_ResourceSharer._serve`` in
    multiprocessing/resource_sharer.py), which only hands file descriptors to processes that
    connect to it and touches no lock of the user's."""
    return any(f.function.endswith("_serve") and "resource_sharer" in normalise_path(f.file) for f in thread.frames)


def is_feeder_thread(thread: ThreadStack) -> bool:
    """True for a multiprocessing queue feeder thread (``Queue._feed``)."""
    return any(f.function.endswith("_feed") and "multiprocessing" in normalise_path(f.file) for f in thread.frames)


def short_path(path: str) -> str:
    """``path`` shortened after ``site-packages/`` or ``/lib/pythonX.Y/`` for display."""
    p = normalise_path(path)
    for marker in ("site-packages/", "dist-packages/"):
        if marker in p:
            return p.split(marker, 1)[1]
    m = re.search(r"/lib/python3[.\d]*/", p)
    if m:
        return p[m.end() :]
    return p


def where(frame: Frame) -> str:
    """``file:line`` of ``frame`` (the library name for native frames)."""
    if frame.native:
        return f"{frame.function} ({frame.file})"
    return f"{frame.file}:{frame.line}"


# A get from a queue that never blocks (queue.Queue and multiprocessing.Queue: get_nowait(),
# get(False), get(block=False), get(timeout=0)): the line a spinning consumer loops on.
NON_BLOCKING_GET = re.compile(
    r"\.get_nowait\(\s*\)|\.get\(\s*(?:block\s*=\s*)?False\b|\.get\([^)]*\btimeout\s*=\s*0(?:\.0*)?\s*\)"
)


def in_non_blocking_get(thread: ThreadStack) -> bool:
    """Whether ``thread``'s stack is inside ``get_nowait`` of the standard library's queues
    (Lib/queue.py, Lib/multiprocessing/queues.py)."""
    return any(f.function == "get_nowait" and is_stdlib(f) for f in thread.frames)
