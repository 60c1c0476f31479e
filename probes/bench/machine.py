"""The machine a benchmark ran on: CPUs, affinity, cgroup CPU quota, memory, torch, CUDA."""

from __future__ import annotations

import os
import platform
from typing import Optional

import psutil

from watchdog.collect import cgroup


def usable_cpus() -> float:
    """CPUs this process may use: its affinity, capped by its cgroup v2 CPU quota."""
    affinity = len(os.sched_getaffinity(0))
    quota = cgroup.cpu_quota(os.getpid())
    return min(float(affinity), quota) if quota else float(affinity)


def describe() -> dict:
    """Facts recorded with every measurement."""
    import torch

    cuda_device: Optional[str] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "host_cpus": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "cgroup_cpu_quota": cgroup.cpu_quota(os.getpid()),
        "usable_cpus": usable_cpus(),
        "mem_total_bytes": psutil.virtual_memory().total,
        "mem_available_bytes": psutil.virtual_memory().available,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda_device": cuda_device,
    }
