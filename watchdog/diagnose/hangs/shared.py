"""What every hang rule module uses: the mode hang rules fire in, and the workers' numbers."""

from __future__ import annotations

from typing import Dict

from ...types import (
    MODE_HANG,
    Facts,
)

HANG = (MODE_HANG,)


def worker_ids(facts: Facts) -> Dict[int, int]:
    """pid to worker id (the inside view's order of an iterator's workers)."""
    return {pid: i for v in facts.sample.loaders for i, pid in enumerate(v.workers)}


def worker_word(facts: Facts, pid: int) -> str:
    wid = worker_ids(facts).get(pid)
    return f"worker {wid} (pid {pid})" if wid is not None else f"worker pid {pid}"
