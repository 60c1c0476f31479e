"""One benchmark run in a fresh process: build the DataLoader, iterate once, print a JSON
line with the timings. Started by :mod:`probes.bench.measure`; not meant to be run by hand.

Usage: ``python -m probes.bench.child '<json spec>'``. The spec holds ``config`` (a
:class:`~probes.bench.grid.LoaderConfig` as a dict), ``dataset`` (``{"synthetic": {...}}`` or
``{"spec": "module:callable"}``) and ``warmup_batches``.

CPU time is measured twice: over the whole loop (``cpu_s``: ``getrusage`` of this process and
its reaped children, the workers once they exit) and over the steady window alone
(``steady_cpu_s``: this process's ``getrusage`` plus each live worker's ``utime + stime`` from
``/proc/PID/stat`` via psutil, read once per round of batches, so to 1/``CLK_TCK`` s per
worker), which is what a per-sample CPU cost must be compared with, the steady throughput.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import warnings
from typing import Dict, Optional

from watchdog.exits import Exit

MIN_ROUNDS = 3


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _self_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


class _TreeCpu:
    """CPU seconds used so far by this process (all its threads) and its live descendants
    (the DataLoader workers, and a forkserver's), the descendants found at the first reading."""

    def __init__(self) -> None:
        import psutil

        self._procs = psutil.Process().children(recursive=True)

    def read(self) -> Optional[float]:
        """Seconds, or ``None`` when a descendant has gone (the reading would be short)."""
        import psutil

        total = _self_cpu_s()
        try:
            for p in self._procs:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            return None
        return total


def _nbytes(batch) -> int:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.element_size() * batch.nelement()
    if isinstance(batch, (list, tuple)):
        return sum(_nbytes(b) for b in batch)
    if isinstance(batch, dict):
        return sum(_nbytes(b) for b in batch.values())
    return 0


def _to_device(batch, non_blocking: bool):
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to("cuda", non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return [_to_device(b, non_blocking) for b in batch]
    if isinstance(batch, dict):
        return {k: _to_device(v, non_blocking) for k, v in batch.items()}
    return batch


def _len(batch) -> int:
    import torch

    first = batch[0] if isinstance(batch, (list, tuple)) else batch
    if isinstance(first, dict):
        first = next(iter(first.values()))
    return int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() else 1


def run(spec: dict) -> dict:
    """Iterate the configured loader once; returns seconds, samples, CPU seconds and bytes
    measured (``None`` where a run was too short for a steady window)."""
    import torch
    from torch.utils.data import DataLoader

    from .datasets import SyntheticDataset, load_user_dataset

    cfg = spec["config"]
    if "spec" in spec["dataset"]:
        ds = load_user_dataset(spec["dataset"]["spec"], spec["dataset"].get("folder"))
    else:
        syn = spec["dataset"]["synthetic"]
        ds = SyntheticDataset(
            syn["samples"], tuple(syn["shape"]), syn["cpu_steps"], syn["io_s"], syn.get("randn", False)
        )
    cuda = torch.cuda.is_available()
    workers = cfg["num_workers"]
    # Batches arrive in rounds: the workers start together, so each round of num_workers
    # batches lands in a burst. The steady window starts after the warm-up and the first round
    # and spans whole rounds only; a run with fewer than MIN_ROUNDS of them has no steady state.
    round_size = max(workers, 1)
    warmup = max(spec["warmup_batches"], round_size)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(
            ds,
            batch_size=cfg["batch_size"],
            num_workers=workers,
            pin_memory=cfg["pin_memory"],
            prefetch_factor=cfg["prefetch_factor"] if workers else None,
            persistent_workers=cfg["persistent_workers"] if workers else False,
            multiprocessing_context=cfg["multiprocessing_context"] if workers else None,
        )
        cpu0, t0 = _cpu_s(), time.perf_counter()
        arrivals, sizes = [], []
        tree_cpu: Optional[_TreeCpu] = None
        cpu_at: Dict[int, Optional[float]] = {}  # batch index at a round boundary -> CPU seconds of the tree
        h2d_bytes, h2d_s = 0, 0.0
        for batch in loader:
            arrivals.append(time.perf_counter())
            sizes.append(_len(batch))
            i = len(arrivals) - 1
            if i >= warmup and (i - warmup) % round_size == 0:
                if tree_cpu is None:
                    tree_cpu = _TreeCpu()
                cpu_at[i] = tree_cpu.read()
            if cuda:
                c0 = time.perf_counter()
                _to_device(batch, cfg["pin_memory"])
                torch.cuda.synchronize()
                h2d_s += time.perf_counter() - c0
                h2d_bytes += _nbytes(batch)
        total_s = time.perf_counter() - t0
    rounds = (len(arrivals) - 1 - warmup) // round_size if len(arrivals) > warmup else 0
    steady = steady_cpu = steady_samples = None
    if rounds >= MIN_ROUNDS:
        end = warmup + rounds * round_size
        span = arrivals[end] - arrivals[warmup]
        steady_samples = sum(sizes[warmup + 1 : end + 1])
        steady = steady_samples / span if span > 0 else None
        first_cpu, last_cpu = cpu_at.get(warmup), cpu_at.get(end)
        if first_cpu is not None and last_cpu is not None:
            steady_cpu = last_cpu - first_cpu
    pin_warned = any("pin_memory" in str(w.message) for w in caught)
    return {
        "first_batch_s": (arrivals[0] - t0) if arrivals else None,
        "steady_samples_per_s": steady,
        "steady_rounds": rounds,
        "steady_samples": steady_samples,
        "steady_cpu_s": steady_cpu,
        "samples": sum(sizes),
        "batches": len(arrivals),
        "total_s": total_s,
        "cpu_s": _cpu_s() - cpu0,
        "h2d_bytes_per_s": (h2d_bytes / h2d_s) if h2d_s else None,
        "cuda": cuda,
        "pin_memory_warning": pin_warned,
    }


def main() -> int:
    spec = json.loads(sys.argv[1])
    result = run(spec)
    print("BENCH-RESULT " + json.dumps(result), flush=True)
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
