"""Crash rules of DataLoader workers that could not start or run at all: pickling under
spawn/forkserver, ``__main__`` re-imported without a main guard, a loader in a daemonic
process (CPython's multiprocessing programming guidelines: ``worker_start_failed``), and CUDA
touched again in a forked worker (PyTorch's notes on CUDA in multiprocessing:
``cuda_in_forked_worker``). They read ``StderrFacts.start_failures`` and ``.cuda_fork``."""

from __future__ import annotations

from typing import Optional

from ...collect.stderr_facts import stderr_facts, unpickle_error
from ...types import SEVERITY_CRASH, Facts
from ..common import DOC_CUDA_FORK, DOC_MULTI_PROCESS_LOADING, DOC_START_METHODS, SPAWN
from ..engine import Finding, rule
from .shared import CRASH, CRASH_AND_HANG, exit_clause, unpickle_remedy


@rule("worker_start_failed", SEVERITY_CRASH, 3, CRASH)
def worker_start_failed(facts: Facts) -> Optional[Finding]:
    """Workers could not start: under spawn/forkserver the Dataset, ``collate_fn`` or
    ``worker_init_fn`` cannot be pickled, ``__main__`` is re-imported without a main guard, or
    the loader runs in a daemonic process (CPython's multiprocessing programming guidelines)."""
    err = stderr_facts(facts)
    if not err.text:
        return None
    lines = err.start_failures  # a spawned worker's own traceback from pickle.load included
    if not lines:
        return None
    line = lines[-1]
    unpickle = unpickle_error(line)
    if unpickle is not None:
        remedy = unpickle_remedy(*unpickle)
    elif "bootstrapping phase" in line or "start a new process before" in line:
        remedy = (
            'Put the training code under `if __name__ == "__main__":` — spawn and forkserver re-import the main '
            "module in every worker."
        )
    elif "daemonic" in line:
        remedy = (
            "Do not create a DataLoader with num_workers > 0 (or a Pool) inside a DataLoader worker or other daemonic "
            "process; use num_workers=0 there."
        )
    else:
        remedy = (
            "Under spawn/forkserver (Python 3.14's default on Linux) the Dataset, collate_fn and worker_init_fn are "
            "pickled: define them at module top level (no lambdas, local classes or open handles; open files lazily "
            'in the worker), or use multiprocessing_context="fork" if you know the parent holds no locks.'
        )
    methods = sorted({p.start_method for s in facts.timeline for p in s.workers if p.start_method})
    evidence = [f"stderr: {line}"]
    evidence.append(
        f"workers seen: {len({p.pid for s in facts.timeline for p in s.workers})}"
        + (f" (start method {', '.join(methods)})" if methods else "")
        + exit_clause(facts)
    )
    return Finding(
        confidence=0.9,
        summary=f"DataLoader workers could not start: {line[:160]}",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=(facts.sample.main.pid,) if facts.sample.main else (),
        location=err.location,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_START_METHODS),
    )


@rule("cuda_in_forked_worker", SEVERITY_CRASH, 4, CRASH_AND_HANG)
def cuda_in_forked_worker(facts: Facts) -> Optional[Finding]:
    """CUDA was initialised in the parent and touched again in a forked worker (PyTorch's notes on
    CUDA in multiprocessing)."""
    err = stderr_facts(facts)
    lines = err.cuda_fork
    if not lines:
        return None
    return Finding(
        confidence=0.95,
        summary="A forked DataLoader worker touched CUDA after the main process had initialised it.",
        evidence=tuple(f"stderr: {line}" for line in lines[-2:])
        + (f"exit code {facts.exit_code}",) * (facts.exit_code is not None),
        remedy=(
            "Keep the Dataset on the CPU (move batches to the GPU in the training loop), or start workers with "
            'multiprocessing_context="spawn" (or "forkserver"); check libraries that call torch.cuda in __getitem__ '
            "(e.g. torch.load without map_location)."
        ),
        pids=tuple(w.pid for w in facts.sample.workers),
        location=err.location,
        docs=(DOC_CUDA_FORK, DOC_START_METHODS),
        fix=SPAWN,
    )
