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
``worker-sleep``
    ``__getitem__`` of sample 0 sleeps for an hour (a worker stuck in user code, not on a lock).
    Expected diagnosis: ``worker_stuck`` naming the ``time.sleep`` line.
``sleep-outside-loader``
    The main process sleeps for an hour between epochs, outside any DataLoader iterator, while
    no worker exists. Expected diagnosis: ``stall_outside_loader``.

Healthy variants that the watchdog must never report: ``--sample-delay-s`` (each sample waits
that long, as remote storage does: no CPU, no local I/O, batches still arrive),
``--validate-s`` (a CPU-busy validation phase in the main process after each epoch) and
``--busy-thread`` (a CPU-busy background thread in the main process, e.g. a metrics uploader;
combined with ``--fault fork-lock`` it must not hide the deadlock).

The job prints one line per event to stdout, prefixed ``[train]``; the line
``[train] workers-started epoch=E t=T`` gives the wall-clock time (``time.time()``, seconds)
at which the epoch's iterator (and so its workers) was created.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

FEATURES = 64
FAULTS = ("none", "fork-lock", "worker-sleep", "sleep-outside-loader")

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
    """

    def __init__(self, folder: str, samples: int, fault: str, sample_delay_s: float) -> None:
        self.folder = folder
        self.samples = samples
        self.fault = fault
        self.sample_delay_s = sample_delay_s

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int):
        if self.sample_delay_s:
            time.sleep(self.sample_delay_s)
        if self.fault == "worker-sleep" and index == 0:
            time.sleep(3600)  # stuck in user code: worker_stuck
        if self.fault == "fork-lock":
            with _SAMPLE_LOCK:  # inherited locked from the parent: fork_inherited_lock
                return self._read(index)
        return self._read(index)

    def _read(self, index: int):
        with open(os.path.join(self.folder, f"{index:06d}.bin"), "rb") as f:
            values = struct.unpack(f"<{FEATURES}fi", f.read())
        return torch.tensor(values[:FEATURES]), values[FEATURES]


def _busy_thread(stop: threading.Event) -> None:
    """Burn CPU in pure Python until ``stop`` is set (a busy logger or metrics uploader)."""
    x = 0
    while not stop.is_set():
        for i in range(10_000):
            x = (x * 31 + i) % 1_000_003


def _hold_lock_while_forking(loader: DataLoader):
    """Create ``loader``'s iterator (forking its workers) while another thread holds the lock."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with _SAMPLE_LOCK:
            held.set()
            release.wait()

    thread = threading.Thread(target=holder, name="lock-holder", daemon=True)
    thread.start()
    held.wait()
    iterator = iter(loader)  # forks the workers now, with _SAMPLE_LOCK held
    release.set()
    thread.join()
    return iterator


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
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    folder = tempfile.mkdtemp(prefix="dlwatch-train-")
    stop = threading.Event()
    try:
        write_samples(folder, args.samples)
        if args.busy_thread:
            threading.Thread(target=_busy_thread, args=(stop,), name="busy", daemon=True).start()
        dataset = FileDataset(folder, args.samples, args.fault, args.sample_delay_s)
        loader = DataLoader(
            dataset,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=args.num_workers,
            pin_memory=args.pin_memory,
            persistent_workers=args.persistent_workers and args.num_workers > 0,
            multiprocessing_context=args.multiprocessing_context if args.num_workers else None,
        )
        model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss_fn = torch.nn.CrossEntropyLoss()
        _log(f"pid={os.getpid()} num_workers={args.num_workers} fault={args.fault}")
        for epoch in range(args.epochs):
            if args.fault == "sleep-outside-loader" and epoch == 1:
                _log("sleeping outside the loader")
                time.sleep(3600)
            if args.fault == "fork-lock" and args.num_workers > 0:
                iterator = _hold_lock_while_forking(loader)
            else:
                iterator = iter(loader)
            _log(f"workers-started epoch={epoch} t={time.time():.3f}")
            total = 0.0
            for x, y in iterator:
                opt.zero_grad()
                loss = loss_fn(model(x), y)
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


if __name__ == "__main__":
    sys.exit(main())
