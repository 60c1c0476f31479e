"""Datasets the benchmarks load: a synthetic one with calibrated CPU cost and simulated
storage latency, or the user's own via ``module:callable``."""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Optional, Tuple

import torch
from torch.utils.data import Dataset, default_collate

# The unit of synthetic CPU work: one step of a 32-bit linear congruential generator in pure
# Python (single-threaded whatever the BLAS/OpenMP settings, so calibration holds in workers).
_CALIBRATION_STEPS = 200_000


class DatasetError(Exception):
    """``--dataset`` cannot be used; the message names it and says why."""


def burn(steps: int) -> int:
    """Run ``steps`` LCG steps; returns the state (so the work cannot be skipped)."""
    x = 12345
    for _ in range(steps):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def calibrate_steps_per_ms() -> float:
    """LCG steps per millisecond of CPU time on this machine (median of three timings of
    ``_CALIBRATION_STEPS`` steps, measured with ``time.process_time``)."""
    rates = []
    for _ in range(3):
        t0 = time.process_time()
        burn(_CALIBRATION_STEPS)
        dt = time.process_time() - t0
        rates.append(_CALIBRATION_STEPS / max(dt * 1000, 1e-6))
    return sorted(rates)[1]


class SyntheticDataset(Dataset):
    """``samples`` tensors of ``shape`` (float32) with integer labels.

    Args:
        samples: dataset length.
        shape: sample shape, e.g. ``(3, 224, 224)``.
        cpu_steps: LCG steps of real CPU work per sample (``cpu_ms × steps_per_ms``).
        io_s: seconds each sample waits (``time.sleep``), as remote storage would: no CPU, no
            local I/O.
        randn: fill samples with ``torch.randn`` (the seed-check experiment) instead of a
            constant (cheaper, so ``cpu_ms`` dominates).
    """

    def __init__(
        self, samples: int, shape: Tuple[int, ...], cpu_steps: int = 0, io_s: float = 0.0, randn: bool = False
    ) -> None:
        self.samples = samples
        self.shape = tuple(shape)
        self.cpu_steps = cpu_steps
        self.io_s = io_s
        self.randn = randn

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int):
        if self.io_s:
            time.sleep(self.io_s)
        if self.cpu_steps:
            burn(self.cpu_steps)
        x = torch.randn(self.shape) if self.randn else torch.full(self.shape, float(index % 251))
        return x, index % 10


def load_user_dataset(spec: str, folder: Optional[str] = None) -> Dataset:
    """The Dataset returned by ``module:callable`` (the module imported with ``folder``, default
    the working directory, on ``sys.path``), checked to have a length, an item 0, and two items
    that ``default_collate`` accepts. ``folder`` goes last on ``sys.path``, after the installed
    packages: a module there named like one of them (a ``torch.py`` another user left in a
    shared folder) never shadows it; the user's own module names are still found there.

    Raises:
        DatasetError: naming ``spec``: bad form, the module or callable missing, the callable
            raising, no ``__len__``/``__getitem__``, empty, or items that cannot be collated.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise DatasetError(f"--dataset {spec}: expected module:callable, e.g. mypkg.data:make_dataset")
    folder = os.path.abspath(folder or os.getcwd())
    if folder not in sys.path:
        sys.path.append(folder)
    try:
        module = importlib.import_module(module_name)
    except BaseException as e:  # the user's module may raise anything while importing, SystemExit included
        raise DatasetError(f"--dataset {spec}: cannot import {module_name}: {type(e).__name__}: {e}") from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise DatasetError(f"--dataset {spec}: {module_name} has no callable {attr!r}")
    try:
        ds = factory()
    except BaseException as e:  # SystemExit included: it must not end the benchmark silently
        raise DatasetError(f"--dataset {spec}: {attr}() raised {type(e).__name__}: {e}") from None
    if not hasattr(ds, "__getitem__") or not hasattr(ds, "__len__"):
        raise DatasetError(
            f"--dataset {spec}: {attr}() returned {type(ds).__name__}, not a map-style Dataset (__len__ and "
            "__getitem__)"
        )
    try:
        n = len(ds)
    except Exception as e:
        raise DatasetError(f"--dataset {spec}: len() raised {type(e).__name__}: {e}") from None
    if n < 2:
        raise DatasetError(f"--dataset {spec}: needs at least 2 items, has {n}")
    try:
        default_collate([ds[0], ds[1]])
    except Exception as e:
        raise DatasetError(
            f"--dataset {spec}: items 0 and 1 cannot be batched by default_collate: {type(e).__name__}: {e}"
        ) from None
    return ds


def sample_bytes(ds: Dataset) -> Optional[int]:
    """Bytes of tensors in item 0 (the payload a worker ships per sample), or ``None``."""
    try:
        item = ds[0]
    except Exception:
        return None
    total = 0
    stack = [item]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            total += x.element_size() * x.nelement()
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return total
