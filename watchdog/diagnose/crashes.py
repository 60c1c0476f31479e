"""Crash rules: the job (or a worker) died, and PyTorch said why on stderr.

They read PyTorch's own error text in the stderr tail together with what the timeline saw of
the processes, and fire in ``crash`` mode (the job exited) and in ``hang`` mode (a dead
worker or an exhausted resource explains a lost batch). Messages matched, from
torch/utils/data/dataloader.py (``_try_get_data``), torch/utils/data/_utils/signal_handling.py
and torch/csrc/DataLoader.cpp (worker signal handlers), torch/multiprocessing/reductions.py and
torch/csrc/cuda (lazy init), and CPython multiprocessing.
"""

from __future__ import annotations

import re
from typing import Optional

from ..types import MODE_CRASH, MODE_LIVE, SEVERITY_CRASH, Diagnosis, Facts
from .common import (
    DOC_CUDA_FORK,
    DOC_MULTI_PROCESS_LOADING,
    DOC_MULTIPROCESSING,
    DOC_SHARING_STRATEGIES,
    DOC_START_METHODS,
    max_over_timeline,
    mib,
    stderr_lines,
    traceback_location,
)
from .engine import rule

_KILLED = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (?:is killed by signal: ([^.]+)\.|exited unexpectedly)")
_SHM = re.compile(
    r"insufficient shared memory|unable to allocate shared memory|Unexpected bus error|No space left on device \(28\)|unable to write to file </torch_|unable to open shared memory object",
    re.I,
)
_FD = re.compile(r"received 0 items of ancdata|Too many open files|OSError: \[Errno 24\]")
_START = re.compile(
    r"Can't pickle local object|Can't pickle <|cannot pickle '[^']+' object|Can't get attribute '[^']+' on <module '__main__'"
    r"|An attempt has been made to start a new process before|daemonic processes are not allowed to have children"
)
_PICKLE = re.compile(r"[Cc]an't pickle|cannot pickle")
# A pickling error counts as a start failure only on the process-start path (Process.start ->
# Popen._launch -> reduction.dump in popen_spawn_posix.py / popen_forkserver.py).
_START_PATH = re.compile(r"popen_(?:spawn|forkserver)_posix\.py|popen_forkserver\.py|in _launch\b")
_CUDA_FORK = re.compile(r"Cannot re-initialize CUDA in forked subprocess")


def _applies(facts: Facts) -> bool:
    return facts.mode != MODE_LIVE and bool(facts.stderr_tail)


def _exit(facts: Facts) -> str:
    return "" if facts.exit_code is None else f"; the job exited with code {facts.exit_code}"


@rule(rank=1)
def shm_exhausted(facts: Facts) -> Optional[Diagnosis]:
    """``/dev/shm`` full: workers put every batch's tensors in shared memory (field notes B12)."""
    lines = stderr_lines(facts, _SHM) if _applies(facts) else []
    if not lines:
        return None
    total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
    peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
    evidence = [f"stderr: {line}" for line in lines[-2:]]
    creators = sorted({int(pid) for pid in re.findall(r"torch_(\d+)_", facts.stderr_tail)})
    if creators:
        evidence.append(
            f"the failing shared-memory segments were being created by pid {', '.join(map(str, creators))} (torch_<pid>_… names)"
        )
    evidence.append(
        f"/dev/shm (as the job sees it): {mib(total)} in all, peak use seen {mib(peak)} at the sampling interval "
        f"(a batch's allocation that does not fit fails between samples){_exit(facts)}"
    )
    return Diagnosis(
        kind="shm_exhausted",
        location=traceback_location(facts.stderr_tail),
        severity=SEVERITY_CRASH,
        confidence=0.9 if peak is not None and total and peak >= 0.5 * total else 0.75,
        summary=f"Shared memory (/dev/shm, {mib(total)}) ran out while workers passed batches to the main process.",
        evidence=tuple(evidence),
        remedy=(
            "Give the job more shared memory: docker run --shm-size=8g (or --ipc=host); on Kubernetes mount an emptyDir "
            "with medium: Memory at /dev/shm; or lower batch_size × prefetch_factor × num_workers."
        ),
        pids=tuple(creators) or tuple(w.pid for w in facts.sample.workers),
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_SHARING_STRATEGIES),
    )


@rule(rank=2)
def fd_exhausted(facts: Facts) -> Optional[Diagnosis]:
    """File descriptors exhausted under the ``file_descriptor`` sharing strategy: one fd per
    shared tensor storage held by main (field notes B13)."""
    lines = stderr_lines(facts, _FD) if _applies(facts) else []
    if not lines:
        return None
    main = facts.sample.main
    pid = main.pid if main else None
    peak = max_over_timeline(facts, lambda s: s.main.num_fds if s.main else None)
    limit = max_over_timeline(facts, lambda s: s.main.rlimit_nofile_soft if s.main else None)
    evidence = [f"stderr: {line}" for line in lines[-2:]]
    evidence.append(
        f"main pid {pid}: peak open file descriptors seen {peak if peak is not None else 'unknown'} of RLIMIT_NOFILE {limit if limit is not None else 'unknown'}{_exit(facts)}"
    )
    return Diagnosis(
        kind="fd_exhausted",
        location=traceback_location(facts.stderr_tail),
        severity=SEVERITY_CRASH,
        confidence=0.9,
        summary=f"The main process ran out of file descriptors (RLIMIT_NOFILE {limit}) receiving shared tensors from workers.",
        evidence=tuple(evidence),
        remedy=(
            'Call torch.multiprocessing.set_sharing_strategy("file_system") at the start of the program, or raise the '
            "limit (ulimit -n 65536; Docker --ulimit nofile=65536:65536); do not keep many batches alive in main."
        ),
        pids=(pid,) if pid else (),
        docs=(DOC_SHARING_STRATEGIES,),
    )


@rule(rank=5)
def worker_killed(facts: Facts) -> Optional[Diagnosis]:
    """A worker vanished or was killed by a signal; PyTorch raises "DataLoader worker (pid N) is
    killed by signal" (SIGCHLD handler) or "exited unexpectedly" (``_try_get_data``)."""
    if facts.mode != MODE_CRASH or not facts.stderr_tail:
        return None
    matches = list(_KILLED.finditer(facts.stderr_tail))
    if not matches:
        return None
    m = next((x for x in reversed(matches) if x.group(2)), matches[-1])  # "killed by signal" says more
    pids = tuple(int(p) for p in re.findall(r"\d+", m.group(1)))
    signal_name = m.group(2)
    evidence = [f"stderr: {m.group(0)}"]
    for pid in pids:
        last = facts.last_seen(pid)
        if last is not None:
            evidence.append(f"worker pid {pid}: last seen state {last.status}, RSS {mib(last.rss_bytes)}, USS {mib(last.uss_bytes)}")
    oom = bool(facts.oom_kills)
    if oom:
        evidence.append(f"the job's cgroup counted {facts.oom_kills} OOM kill(s) (memory.events oom_kill) while it was watched")
    avail = max_over_timeline(facts, lambda s: -s.host.mem_available_bytes)
    if avail is not None:
        evidence.append(f"lowest available memory seen: {mib(-avail)}{_exit(facts)}")
    how = f"killed by signal {signal_name}" if signal_name else "exited unexpectedly"
    if oom:
        how += " by the OOM killer"
    seen = any(facts.last_seen(pid) is not None for pid in pids)
    if not seen:
        evidence.append("the watchdog never sampled these workers (they died within a sampling interval of starting)")
    low_memory = avail is not None and -avail < 0.05 * 2**30
    memory_fix = oom or (signal_name == "Killed" and low_memory)
    return Diagnosis(
        kind="worker_killed",
        location=traceback_location(facts.stderr_tail),
        severity=SEVERITY_CRASH,
        confidence=(0.9 if oom or signal_name else 0.75) - (0 if seen else 0.15),
        summary=f"DataLoader worker(s) {', '.join(map(str, pids))} {how}; the main process stopped with an error.",
        evidence=tuple(evidence),
        remedy=(
            (
                "Memory: lower num_workers, batch_size × prefetch_factor, or the per-worker copy-on-read growth (keep Dataset "
                "metadata in numpy arrays/tensors, not Python lists/dicts), or raise the memory limit. "
                if memory_fix
                else ""
            )
            + "Check `dmesg | grep -i -e oom -e killed` (SIGKILL usually means the OOM killer or an operator) and the worker's last "
            "lines on stderr; a segmentation fault or bus error points to a native library in __getitem__ or to /dev/shm."
        ),
        pids=pids,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_MULTIPROCESSING),
    )


@rule(rank=3)
def worker_start_failed(facts: Facts) -> Optional[Diagnosis]:
    """Workers could not start: under spawn/forkserver the Dataset, ``collate_fn`` or
    ``worker_init_fn`` cannot be pickled, ``__main__`` is re-imported without a main guard, or
    the loader runs in a daemonic process (field notes B28–B30)."""
    if facts.mode != MODE_CRASH or not facts.stderr_tail:
        return None  # workers that cannot start end the job at once: never a hang
    lines = [x for x in stderr_lines(facts, _START) if not _PICKLE.search(x) or _START_PATH.search(facts.stderr_tail)]
    if not lines:
        return None
    line = lines[-1]
    if "bootstrapping phase" in line or "start a new process before" in line:
        remedy = (
            'Put the training code under `if __name__ == "__main__":` — spawn and forkserver re-import the main module in every worker.'
        )
    elif "daemonic" in line:
        remedy = "Do not create a DataLoader with num_workers > 0 (or a Pool) inside a DataLoader worker or other daemonic process; use num_workers=0 there."
    else:
        remedy = (
            "Under spawn/forkserver (Python 3.14's default on Linux) the Dataset, collate_fn and worker_init_fn are pickled: "
            "define them at module top level (no lambdas, local classes or open handles; open files lazily in the worker), "
            'or use multiprocessing_context="fork" if you know the parent holds no locks.'
        )
    methods = sorted({p.start_method for s in facts.timeline for p in s.workers if p.start_method})
    evidence = [f"stderr: {line}"]
    evidence.append(
        f"workers seen: {len({p.pid for s in facts.timeline for p in s.workers})}"
        + (f" (start method {', '.join(methods)})" if methods else "")
        + _exit(facts)
    )
    return Diagnosis(
        kind="worker_start_failed",
        location=traceback_location(facts.stderr_tail),
        severity=SEVERITY_CRASH,
        confidence=0.9,
        summary=f"DataLoader workers could not start: {line[:160]}",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=(facts.sample.main.pid,) if facts.sample.main else (),
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_START_METHODS),
    )


@rule(rank=4)
def cuda_in_forked_worker(facts: Facts) -> Optional[Diagnosis]:
    """CUDA was initialised in the parent and touched again in a forked worker (field notes B10)."""
    lines = stderr_lines(facts, _CUDA_FORK) if _applies(facts) else []
    if not lines:
        return None
    return Diagnosis(
        kind="cuda_in_forked_worker",
        location=traceback_location(facts.stderr_tail),
        severity=SEVERITY_CRASH,
        confidence=0.95,
        summary="A forked DataLoader worker touched CUDA after the main process had initialised it.",
        evidence=tuple(f"stderr: {line}" for line in lines[-2:]) + (f"exit code {facts.exit_code}",) * (facts.exit_code is not None),
        remedy=(
            "Keep the Dataset on the CPU (move batches to the GPU in the training loop), or start workers with "
            'multiprocessing_context="spawn" (or "forkserver"); check libraries that call torch.cuda in __getitem__ '
            "(e.g. torch.load without map_location)."
        ),
        pids=tuple(w.pid for w in facts.sample.workers),
        docs=(DOC_CUDA_FORK, DOC_START_METHODS),
    )
