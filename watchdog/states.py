"""What each thread and each worker is doing, decided once from its kernel wait and its frames.

Detection (to dismiss a stall or prove it) and every diagnosis rule read these enums instead of
matching frame names or evidence text themselves. Pure: reads records, touches no process.
"""

from __future__ import annotations

from typing import Optional

from . import frames
from .types import KernelWait, TextEnum, ThreadStack, WaitKind


class Activity(TextEnum):
    """One thread's state, for the rules. The value is what reports show."""

    RUNNING = "running"
    PRIVATE_WAIT = "untimed wait on a private futex"
    SHARED_WAIT = "untimed wait on a shared futex"
    TIMED_WAIT = "timed wait"
    FD_WAIT = "untimed wait on a file descriptor"
    KERNEL_IO = "uninterruptible kernel I/O"
    CHILD_WAIT = "waiting for a child process"
    STOPPED = "stopped"
    LOADER_IDLE = "idle in PyTorch's loader loop"
    UNKNOWN = "unknown"


_BY_WAIT = {
    WaitKind.RUNNING: Activity.RUNNING,
    WaitKind.FUTEX_PRIVATE: Activity.PRIVATE_WAIT,
    WaitKind.FUTEX_SHARED: Activity.SHARED_WAIT,
    WaitKind.TIMED: Activity.TIMED_WAIT,
    WaitKind.FD: Activity.FD_WAIT,
    WaitKind.DISK: Activity.KERNEL_IO,
    WaitKind.CHILD: Activity.CHILD_WAIT,
    WaitKind.STOPPED: Activity.STOPPED,
}


def is_loader_idle(thread: Optional[ThreadStack]) -> bool:
    """True when the frames show one of PyTorch's own idle waits: a worker waiting for its next
    index (``index_queue.get`` directly under the worker loop), main waiting for a batch in
    ``_try_get_data`` with no user code inside, the pin-memory thread waiting in
    ``do_one_step``'s ``in_queue.get``, a multiprocessing queue feeder thread waiting for
    something to send, or multiprocessing's resource-sharer thread waiting for a connection
    (torch/utils/data/_utils/worker.py, dataloader.py, pin_memory.py; CPython
    multiprocessing/queues.py ``Queue._feed``, multiprocessing/resource_sharer.py)."""
    if thread is None or not thread.frames:
        return False
    if frames.is_idle_worker(thread) or frames.is_resource_sharer(thread):
        return True
    if frames.is_feeder_thread(thread):
        top = frames.innermost_python(thread)
        return top is not None and top.function.endswith("wait")
    depth = frames.loader_wait_depth(thread)
    if depth is not None:
        return frames.innermost_user_above(thread, depth) is None
    if frames.has_frame(thread, frames.PIN_LOOP_FUNCS, frames.PIN_MEMORY_FILE):
        return not frames.has_frame(thread, frames.PIN_WORK_FUNCS, frames.PIN_MEMORY_FILE)
    return False


def activity(wait: Optional[KernelWait], thread: Optional[ThreadStack] = None) -> Activity:
    """The thread's :class:`Activity`: PyTorch's idle loop when its frames say so and it is
    not running, else what its kernel wait says."""
    kind = wait.kind if wait is not None else WaitKind.UNKNOWN
    if kind not in (WaitKind.RUNNING, WaitKind.STOPPED) and is_loader_idle(thread):
        return Activity.LOADER_IDLE
    return _BY_WAIT.get(kind, Activity.UNKNOWN)


class WorkerState(TextEnum):
    """What a DataLoader worker's loop thread is doing, from its frames."""

    IDLE = "idle, waiting for an index"
    IN_DATASET = "inside the Dataset"
    STARTING = "not yet in the worker loop"
    NO_STACK = "unknown (no stack)"


def worker_state(loop_thread: Optional[ThreadStack]) -> WorkerState:
    """The state of a worker from the thread that runs (or should run) its loop."""
    if loop_thread is None:
        return WorkerState.NO_STACK
    if frames.is_idle_worker(loop_thread):
        return WorkerState.IDLE
    if frames.has_frame(loop_thread, frames.WORKER_LOOP_FUNCS):
        return WorkerState.IN_DATASET
    return WorkerState.STARTING


# PyTorch's waiting loops poll with ``MP_STATUS_CHECK_INTERVAL`` (5 s): multiprocessing's
# ``Queue.get(timeout=5)`` polls the pipe for what is left of 5 s (``Connection.poll`` ->
# ``multiprocessing.connection.wait``, in milliseconds rounded up), and
# ``queue.Queue.get(timeout=5)`` (main with pin_memory) waits on a private futex with a timeout.
_IDLE_POLL_MS = (4000, 5000)


def may_be_loader_idle_poll(wait: Optional[KernelWait]) -> bool:
    """True when ``wait`` could be one of PyTorch's own 5-second liveness polls: a poll-like
    call with a timeout of 4–5 s, or a futex wait with a timeout (its length is not visible).
    Only frames can tell such a wait from the user's own; every other timed wait (a sleep, a
    socket's 30 s timeout) is the user's code."""
    if wait is None or wait.kind is not WaitKind.TIMED:
        return False
    if wait.syscall == "futex":
        return True
    return wait.timeout_ms is not None and _IDLE_POLL_MS[0] <= wait.timeout_ms <= _IDLE_POLL_MS[1]
