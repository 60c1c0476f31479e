"""A small, real training job with an injectable DataLoader failure.

Run it directly::

    python -m probes.train                       # healthy: trains, exits 0
    python -m probes.train --fault fork-lock     # every worker deadlocks on an inherited lock

It writes ``--samples`` sample files into a temporary folder, reads one file per
``Dataset.__getitem__`` and trains a small linear model for ``--epochs`` epochs with a real
``torch.utils.data.DataLoader``. It never imports :mod:`watchdog`.

Faults (``--fault NAME``) and what the watchdog must conclude:

``fork-lock``
    A background thread of the main process holds ``_SAMPLE_LOCK`` (a ``threading.Lock``) while
    the DataLoader forks its workers; ``__getitem__`` takes that lock, so every forked worker
    blocks forever on a lock whose holder thread does not exist in it. The parent's copy is
    released right after the fork, so the main process itself is fine and waits for data in
    ``_MultiProcessingDataLoaderIter._try_get_data``. Expected diagnosis: ``fork_inherited_lock``
    naming the ``with _SAMPLE_LOCK:`` line below. Only the ``fork`` start method deadlocks
    (``spawn`` and ``forkserver`` workers re-import this module and get a fresh lock), which is
    exactly the remedy the watchdog gives.
``fork-native-lock``
    The same with a native mutex, as a C extension (a database client, an image library)
    holds one: a ``pthread_mutex_t`` locked through ctypes by a parent thread during the fork.
    Expected: ``fork_inherited_lock`` with the native frames and the calling Python line.
``worker-sleep``
    ``__getitem__`` of sample 0 sleeps for an hour (a worker stuck in user code, not on a lock).
    Expected diagnosis: ``worker_stuck`` naming the ``time.sleep`` line.
``worker-spin``
    ``__getitem__`` of sample 0 loops forever burning CPU and never returns. Expected
    ``worker_stuck`` once ``busy_stall_timeout_s`` passes.
``worker-fifo``
    ``__getitem__`` of sample 0 opens a FIFO that no one writes (a stuck file system, emulated:
    the worker sleeps in the kernel's ``wait_for_partner``). Expected ``worker_blocked_io``.
``unpicklable-batch``
    Batch 0 holds an object whose pickling fails in the worker's queue feeder thread: the
    feeder prints a traceback, the batch is lost, and main waits for it forever. Expected
    ``batch_lost``.
``worker-killed``
    A worker kills itself with SIGKILL on sample 0 (as the OOM killer would). PyTorch raises
    "DataLoader worker (pid N) is killed by signal: Killed." Expected ``worker_killed``.
``unpicklable-dataset``
    The Dataset holds a lambda; with ``--multiprocessing-context spawn`` or ``forkserver``
    workers cannot start ("Can't pickle local object"). Expected ``worker_start_failed``.
``collective-wait``
    Between epochs main waits in ``torch.distributed.barrier`` (gloo) for a peer rank that
    never calls it. Expected ``stall_outside_loader`` with the collective named.
``sleep-outside-loader``
    The main process sleeps for an hour between epochs, outside any DataLoader iterator, while
    no worker exists. Expected diagnosis: ``stall_outside_loader``.

Other knobs, for the exhaustion and pressure cases of the catalogue: ``--sample-kib`` (bigger
samples: more ``/dev/shm`` per batch), ``--keep-batches N`` (main keeps its last N batches
alive: one file descriptor per tensor under the ``file_descriptor`` sharing strategy),
``--nofile N`` (lower RLIMIT_NOFILE), ``--fill-shm-frac F`` (fill ``/dev/shm`` to that fraction
first), ``--pin-cpu N`` (narrow the job's CPU affinity to CPU N), ``--worker-threads N`` and
``--cpu-ms MS`` (multi-threaded CPU work per sample in each worker), ``--cow-mib N`` (the
Dataset holds N MiB of Python strings; each sample touches the next slice of them, so
reference counting un-shares copy-on-write pages and workers' USS grows).

Healthy variants that the watchdog must never report: ``--sample-delay-s`` (each sample waits
that long, as remote storage does: no CPU, no local I/O, batches still arrive),
``--validate-s`` (a CPU-busy validation phase in the main process after each epoch) and
``--busy-thread`` (a CPU-busy background thread in the main process, e.g. a metrics uploader;
combined with ``--fault fork-lock`` it must not hide the deadlock).

The job prints one line per event to stdout, prefixed ``[train]``; the line
``[train] workers-started epoch=E t=T`` gives the wall-clock time (``time.time()``, seconds)
at which the epoch's iterator (and so its workers) was created, and ``[train] fault NAME … t=T``
when a fault is injected (from the process that injects it).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import resource
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

FEATURES = 64
FAULTS = (
    "none",
    "fork-lock",
    "fork-native-lock",
    "worker-sleep",
    "worker-spin",
    "worker-fifo",
    "unpicklable-batch",
    "worker-killed",
    "unpicklable-dataset",
    "sleep-outside-loader",
    "collective-wait",
)

# Taken by every __getitem__ under --fault fork-lock (see the module docstring).
_SAMPLE_LOCK = threading.Lock()


def _log(message: str) -> None:
    print(f"[train] {message}", flush=True)


def write_samples(folder: str, samples: int) -> None:
    """Write ``samples`` files of ``FEATURES`` float32 values plus an int32 label into ``folder``."""
    gen = torch.Generator().manual_seed(0)
    for i in range(samples):
        x = torch.randn(FEATURES, generator=gen)
        label = int(x[:4].sum() > 0)
        with open(os.path.join(folder, f"{i:06d}.bin"), "wb") as f:
            f.write(struct.pack(f"<{FEATURES}fi", *x.tolist(), label))


class FileDataset(Dataset):
    """One sample per file; ``__getitem__`` reads and decodes it.

    Args:
        folder: the folder written by :func:`write_samples`.
        samples: number of files in it.
        fault: a name from ``FAULTS``.
        sample_delay_s: seconds each ``__getitem__`` waits before reading (simulated remote
            storage: the worker sleeps, using no CPU and no local I/O).
        sample_kib: extra KiB of float32 padding per sample (0: none).
        cpu_ms: milliseconds of matrix work per sample.
        cow_mib: MiB of Python strings held by the Dataset (copy-on-read growth).
    """

    def __init__(
        self,
        folder: str,
        samples: int,
        fault: str,
        sample_delay_s: float,
        sample_kib: int = 0,
        cpu_ms: float = 0.0,
        cow_mib: int = 0,
    ) -> None:
        self.folder = folder
        self.samples = samples
        self.fault = fault
        self.sample_delay_s = sample_delay_s
        self.sample_kib = sample_kib
        self.cpu_ms = cpu_ms
        self.strings = [str(i) * 8 for i in range(cow_mib * 2**20 // 64)] if cow_mib else []
        self.fifo = os.path.join(folder, "stuck.fifo")
        if fault == "worker-fifo":
            os.mkfifo(self.fifo)
        if fault == "unpicklable-dataset":
            self.transform = lambda x: x  # a lambda cannot be pickled for spawn/forkserver workers

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int):
        if self.sample_delay_s:
            time.sleep(self.sample_delay_s)
        if self.strings:
            step = max(1, len(self.strings) // self.samples)
            for s in self.strings[index * step : (index + 1) * step]:
                len(s)  # a reference taken and dropped: a write to the object's page
        if self.cpu_ms:
            _burn_cpu(self.cpu_ms)
        if index == 0:
            self._fault_on_first_sample()
        if self.fault == "fork-lock":
            with _SAMPLE_LOCK:  # inherited locked from the parent: fork_inherited_lock
                return self._read(index)
        if self.fault == "fork-native-lock":
            _native_lock_and_unlock()
        x, y = self._read(index)
        if self.sample_kib:
            x = torch.cat([x, torch.full((self.sample_kib * 256,), float(index))])
        if self.fault == "unpicklable-batch" and index == 0:
            return x, y, _Unpicklable()
        return x, y

    def _fault_on_first_sample(self) -> None:
        if self.fault in ("worker-sleep", "worker-spin", "worker-fifo", "worker-killed"):
            _log(f"fault {self.fault} in worker pid={os.getpid()} t={time.time():.3f}")
        if self.fault == "worker-sleep":
            time.sleep(3600)  # stuck in user code: worker_stuck
        elif self.fault == "worker-spin":
            while True:  # burns CPU, never returns a batch: worker_stuck
                sum(range(1000))
        elif self.fault == "worker-fifo":
            with open(self.fifo, "rb") as f:  # no writer ever comes: worker_blocked_io
                f.read()
        elif self.fault == "worker-killed":
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would: worker_killed

    def _read(self, index: int):
        with open(os.path.join(self.folder, f"{index:06d}.bin"), "rb") as f:
            values = struct.unpack(f"<{FEATURES}fi", f.read())
        return torch.tensor(values[:FEATURES]), values[FEATURES]


class _Unpicklable:
    """Fails to pickle, as a sample holding a file handle or a C object would."""

    def __reduce__(self):
        raise TypeError("cannot pickle '_Unpicklable' object (a sample held a live handle)")


def _collate_keep_extra(batch):
    """default_collate on (x, y) and the extra objects passed through as a list."""
    from torch.utils.data import default_collate

    if len(batch[0]) == 3 or any(len(b) == 3 for b in batch):
        return default_collate([b[:2] for b in batch]) + [[b[2] for b in batch if len(b) == 3]]
    return default_collate(batch)


def _burn_cpu(ms: float) -> None:
    """About ``ms`` milliseconds of matrix multiplication (intra-op threads as configured)."""
    deadline = time.perf_counter() + ms / 1000
    a = torch.randn(128, 128)
    while time.perf_counter() < deadline:
        a = torch.tanh(a @ a)


_LIBC = None
_NATIVE_MUTEX = None


def _native_mutex():
    """A process-wide ``pthread_mutex_t`` (zero bytes are PTHREAD_MUTEX_INITIALIZER on glibc)."""
    global _LIBC, _NATIVE_MUTEX
    if _NATIVE_MUTEX is None:
        _LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _NATIVE_MUTEX = ctypes.create_string_buffer(64)
    return _LIBC, _NATIVE_MUTEX


def _native_lock_and_unlock() -> None:
    libc, mutex = _native_mutex()
    libc.pthread_mutex_lock(mutex)  # inherited locked from the parent: fork_inherited_lock (native)
    libc.pthread_mutex_unlock(mutex)


def _busy_thread(stop: threading.Event) -> None:
    """Burn CPU in pure Python until ``stop`` is set (a busy logger or metrics uploader)."""
    x = 0
    while not stop.is_set():
        for i in range(10_000):
            x = (x * 31 + i) % 1_000_003


def _hold_lock_while_forking(loader: DataLoader, native: bool = False):
    """Create ``loader``'s iterator (forking its workers) while another thread holds the lock
    (``_SAMPLE_LOCK``, or the native mutex when ``native``)."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        if native:
            libc, mutex = _native_mutex()
            libc.pthread_mutex_lock(mutex)
            held.set()
            release.wait()
            libc.pthread_mutex_unlock(mutex)
            return
        with _SAMPLE_LOCK:
            held.set()
            release.wait()

    thread = threading.Thread(target=holder, name="lock-holder", daemon=True)
    thread.start()
    held.wait()
    iterator = iter(loader)  # forks the workers now, with the lock held
    release.set()
    thread.join()
    return iterator


def _worker_init(threads: int):
    def init(_worker_id: int) -> None:
        torch.set_num_threads(threads)  # PyTorch sets 1 in workers; the user raises it again

    return init


def _fill_shm(frac: float) -> str:
    """Write a file into /dev/shm until it is ``frac`` full; returns its path."""
    st = os.statvfs("/dev/shm")
    total = st.f_blocks * st.f_frsize
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    path = f"/dev/shm/dlwatch-train-fill-{os.getpid()}"
    with open(path, "wb") as f:
        f.write(b"\0" * max(0, int(total * frac) - used))
    return path


def _collective_wait() -> None:
    """Wait in a gloo barrier for a peer rank that joined the group but never calls it."""
    import multiprocessing as mp

    import torch.distributed as dist

    ctx = mp.get_context("spawn")
    store_file = tempfile.mktemp(prefix="dlwatch-store-")
    peer = ctx.Process(target=_idle_rank, args=(store_file,), daemon=True)
    peer.start()
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=0, world_size=2)
    _log(f"fault collective-wait t={time.time():.3f}")
    dist.barrier()


def _idle_rank(store_file: str) -> None:
    import torch.distributed as dist

    parent = os.getppid()
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=1, world_size=2)
    while os.getppid() == parent:  # never calls the barrier; leaves when rank 0 is gone
        time.sleep(0.5)


def _validate(seconds: float, model: torch.nn.Module) -> None:
    """A CPU-busy validation phase of ``seconds`` seconds in the main thread."""
    deadline = time.monotonic() + seconds
    x = torch.randn(256, FEATURES)
    with torch.no_grad():
        while time.monotonic() < deadline:
            model(x)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m probes.train", description=__doc__.split("\n")[0])
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--multiprocessing-context", choices=("fork", "spawn", "forkserver"), default=None)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--busy-thread", action="store_true", help="run a CPU-busy background thread")
    p.add_argument("--sample-delay-s", type=float, default=0.0)
    p.add_argument("--validate-s", type=float, default=0.0)
    p.add_argument("--sample-kib", type=int, default=0)
    p.add_argument("--keep-batches", type=int, default=0)
    p.add_argument("--nofile", type=int, default=0)
    p.add_argument("--fill-shm-frac", type=float, default=0.0)
    p.add_argument("--pin-cpu", type=int, default=None)
    p.add_argument("--worker-threads", type=int, default=0)
    p.add_argument("--cpu-ms", type=float, default=0.0)
    p.add_argument("--cow-mib", type=int, default=0)
    p.add_argument("--sharing-strategy", choices=("file_descriptor", "file_system"), default=None)
    p.add_argument("--prefetch-factor", type=int, default=None)
    return p.parse_args(argv)


_FOLDERS: list = []  # the data folders main() made, for an exit that skips its finally


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    if args.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    if args.sharing_strategy:
        torch.multiprocessing.set_sharing_strategy(args.sharing_strategy)
    folder = tempfile.mkdtemp(prefix="dlwatch-train-")
    _FOLDERS.append(folder)
    stop = threading.Event()

    owner = os.getpid()

    def on_term(signum, _frame):  # the watchdog's SIGTERM: leave no sample folder behind
        if os.getpid() != owner:  # a forked worker inherited this handler: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        # The workers die of the same signal; PyTorch's SIGCHLD handler (_set_SIGCHLD_handler,
        # torch/utils/data/_utils/signal_handling.py) would raise "DataLoader worker exited
        # unexpectedly" in the middle of this clean-up and leave the folder behind.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    filler = None
    try:
        write_samples(folder, args.samples)
        if args.fill_shm_frac:
            filler = _fill_shm(args.fill_shm_frac)
        if args.busy_thread:
            threading.Thread(target=_busy_thread, args=(stop,), name="busy", daemon=True).start()
        dataset = FileDataset(
            folder, args.samples, args.fault, args.sample_delay_s, args.sample_kib, args.cpu_ms, args.cow_mib
        )
        loader = DataLoader(
            dataset,
            batch_size=args.batch_size,
            shuffle=args.fault not in ("unpicklable-batch",),
            num_workers=args.num_workers,
            pin_memory=args.pin_memory,
            persistent_workers=args.persistent_workers and args.num_workers > 0,
            multiprocessing_context=args.multiprocessing_context if args.num_workers else None,
            collate_fn=_collate_keep_extra if args.fault == "unpicklable-batch" else None,
            worker_init_fn=_worker_init(args.worker_threads) if args.worker_threads else None,
            prefetch_factor=args.prefetch_factor if args.num_workers else None,
        )
        model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss_fn = torch.nn.CrossEntropyLoss()
        _log(f"pid={os.getpid()} num_workers={args.num_workers} fault={args.fault}")
        for epoch in range(args.epochs):
            if args.fault == "sleep-outside-loader" and epoch == 1:
                _log(f"fault sleep-outside-loader t={time.time():.3f}")
                time.sleep(3600)
            if args.fault == "collective-wait" and epoch == 1:
                _collective_wait()
            if args.fault in ("fork-lock", "fork-native-lock") and args.num_workers > 0:
                iterator = _hold_lock_while_forking(loader, native=args.fault == "fork-native-lock")
            else:
                iterator = iter(loader)
            _log(f"workers-started epoch={epoch} t={time.time():.3f}")
            if epoch == 0 and args.fault in ("fork-lock", "fork-native-lock", "unpicklable-batch"):
                _log(f"fault {args.fault} t={time.time():.3f}")
            total = 0.0
            kept = []
            for batch in iterator:
                x, y = batch[0], batch[1]
                if args.keep_batches:
                    kept = (kept + [batch])[-args.keep_batches :]
                opt.zero_grad()
                loss = loss_fn(model(x[:, :FEATURES]), y)
                loss.backward()
                opt.step()
                total += loss.item()
            _log(f"epoch={epoch} loss={total:.3f}")
            if args.validate_s:
                _validate(args.validate_s, model)
        _log("done")
        return 0
    finally:
        stop.set()
        shutil.rmtree(folder, ignore_errors=True)
        if filler:
            os.unlink(filler)


def _main_exiting_after_a_killed_worker() -> int:
    """``main()``, except that after ``--fault worker-killed`` the job exits with code 1 as
    soon as PyTorch has reported the dead worker: left to the interpreter's exit, multiprocessing
    sometimes hangs joining a queue feeder thread that writes to the dead worker's queue (a
    PyTorch race, diagnosed as ``main_thread_deadlock``; ``probes/cases/exit_hang_queue_feeder``
    reproduces that class on purpose). The catalogue's ``worker_killed`` needs the crash."""
    try:
        return main()
    except RuntimeError:
        if "worker-killed" not in sys.argv:
            raise
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        for folder in _FOLDERS:
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)


if __name__ == "__main__":
    sys.exit(_main_exiting_after_a_killed_worker())
