"""Crash rules of exhausted resources, classified by errno: ``/dev/shm`` full (``shm_exhausted``),
a shared-memory file deleted underneath the job (``shm_removed``), another file system full
(``disk_full``), descriptors (``fd_exhausted``) and memory maps (``map_count_exhausted``) run
out, and files left in ``/dev/shm`` after the job ended (``shm_leaked``). They read the errno
lines of the job's stderr (``StderrFacts.errors``, ``.enospc``: aten/src/ATen/MapAllocator.cpp
"unable to open shared memory object", "unable to mmap", Python's ``OSError``) together with
what the timeline saw of ``/dev/shm``, descriptors and maps.

NOTE [ Errno classes ]
``MapAllocator`` and Python's ``OSError`` end their messages with the errno: ``… (24)`` or
``[Errno 24]``. 24 EMFILE: descriptors (``fd_exhausted``); 28 ENOSPC, or a SIGBUS: ``/dev/shm``
is full (``shm_exhausted``); 12 ENOMEM on ``mmap``: memory maps or memory
(``map_count_exhausted`` when the map count is near ``vm.max_map_count``); 2 ENOENT on a
``/torch_*`` object: the file was deleted underneath the job (``shm_removed``: systemd-logind
``RemoveIPC``, a ``/dev/shm`` cleaner). ENOSPC on a path outside ``/dev/shm`` is a full disk,
not shared memory. The kernel's errno outweighs ``/dev/shm`` use sampled once per interval: a
batch that does not fit fails between samples, and its segment is gone by the next one. So a
nearly empty ``/dev/shm`` contradicts ``shm_exhausted`` (which then says so and ranks last, NOTE
[ Rule ranks ]) only when stderr also holds another errno class that could explain the failure.
These errors are the loader's, wherever they were raised: ``dataset_error`` leaves them to the
rules above, since "fix the Dataset code" is the wrong remedy for a full ``/dev/shm``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ... import frames
from ...collect.stderr_facts import StderrFacts, names_shared_memory, stderr_facts
from ...types import (
    MODE_CRASH,
    MODE_EXIT,
    ROLE_MAIN,
    ROLE_WORKER,
    SEVERITY_CRASH,
    SEVERITY_WARNING,
    Facts,
    FdCensus,
    FdKind,
    Fix,
)
from ..common import (
    DOC_DATALOADER,
    DOC_MULTI_PROCESS_LOADING,
    DOC_SHARING_STRATEGIES,
    fit_line,
    max_over_timeline,
    mib,
)
from ..engine import Finding, rule
from .memory import truncated_mappings
from .shared import CRASH_AND_HANG, exit_clause

# Share of RLIMIT_NOFILE / vm.max_map_count at which a process counts as having hit it.
NEAR_LIMIT = 0.9


def _size(n: float) -> str:
    """Bytes as ``812.0 MiB`` or, from 1 GiB on, ``23.4 GiB``."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else mib(n)


def shm_full_lines(err: StderrFacts) -> List[str]:
    """ENOSPC lines about shared memory (``StderrFacts.enospc``: named, reached through
    PyTorch's shared-memory code, or undecided), and bus errors (NOTE [ Errno classes ]);
    ``[Errno 28] … '/data/cache/x'`` and a plain ``file.write()`` are a full disk, left out."""
    return [n.line for n in err.enospc if n.shared_memory] + list(err.bus_errors)


def _near_limit(facts: Facts, used, limit) -> List[Tuple[str, int, int, int]]:
    """``(role, pid, used, limit)`` of processes whose ``used(p)`` came within NEAR_LIMIT of
    ``limit(p)`` (or the host's) at their last sample, highest share first: who hit the limit,
    with the limit in force then."""
    last = {}
    for s in facts.timeline:
        for p in s.processes:
            u, lim = used(p), limit(p, s)
            if u is not None and lim:
                last[p.pid] = (p.role, p.pid, u, lim)
    hot = [x for x in last.values() if x[2] >= NEAR_LIMIT * x[3]]
    return sorted(hot, key=lambda x: -x[2] / x[3])


_ROLE_WORDS = {ROLE_MAIN: "the main process", ROLE_WORKER: "DataLoader worker"}


def _who(hot) -> str:
    """``DataLoader workers 12640, 12641`` / ``the main process 12637`` for findings' summaries."""
    parts = []
    for role in dict.fromkeys(r for r, *_ in hot):
        pids = [str(pid) for r, pid, _, _ in hot if r == role][:4]
        word = _ROLE_WORDS.get(role, role)
        if role == ROLE_WORKER and len(pids) > 1:
            word = "DataLoader workers"
        parts.append(f"{word} {', '.join(pids)}")
    return " and ".join(parts)


def _shm_kept(facts: Facts, total: Optional[float]) -> Optional[Tuple[float, float, float]]:
    """``(bytes gained, seconds, bytes/s)`` when ``/dev/shm`` use grew in a straight line over
    the timeline by at least half the tmpfs (R² ≥ 0.9, 5 s or more): a loader in steady state
    holds about ``num_workers × prefetch_factor`` batches in shared memory, so use that only
    grows is batches kept after delivery. ``None`` otherwise."""
    points = [(s.t_mono, float(s.host.shm_used_bytes)) for s in facts.timeline if s.host.shm_used_bytes is not None]
    if len(points) < 4 or not total:
        return None
    slope, r2 = fit_line(points)
    gained, span = points[-1][1] - points[0][1], points[-1][0] - points[0][0]
    if slope > 0 and r2 >= 0.9 and span >= 5.0 and gained >= 0.5 * total:
        return gained, span, slope
    return None


def _bus_error_only(err: StderrFacts) -> bool:
    """Whether the only sign of shared memory running out is a bus error (no ENOSPC)."""
    return not any(e.errno == 28 for e in err.errors) and bool(err.bus_errors)


@rule("shm_exhausted", SEVERITY_CRASH, 1, CRASH_AND_HANG)
def shm_exhausted(facts: Facts) -> Optional[Finding]:
    """``/dev/shm`` full: workers put every batch's tensors in shared memory (PyTorch's
    multi-process data loading notes; Docker's default is 64 MB):
    ENOSPC (28), or a bus error when a page of a full tmpfs is first touched."""
    err = stderr_facts(facts)
    lines = shm_full_lines(err)
    if not lines:
        return None
    bus_only = _bus_error_only(err)
    if bus_only and truncated_mappings(facts):
        return None  # a file-backed mapping lost its file's pages: worker_killed says which
    total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
    peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
    evidence = [f"stderr: {line}" for line in lines[-2:]]
    creators = list(err.shm_creators)
    if creators:
        evidence.append(
            f"the failing shared-memory segments were being created by pid {', '.join(map(str, creators))} "
            "(torch_<pid>_… names)"
        )
    evidence.append(
        f"/dev/shm (as the job sees it): {mib(total)} in all, peak use seen {mib(peak)} at the sampling interval "
        f"(a batch's allocation that does not fit fails between samples){exit_clause(facts)}"
    )
    kept = _shm_kept(facts, total)
    if kept is not None:
        gained, span, slope = kept
        evidence.append(
            f"/dev/shm use grew in a straight line for {span:.0f} s (+{mib(gained)}, {slope / 2**20:.1f} MiB/s) and "
            "never fell back: batches that were delivered kept their shared memory (something in main holds them)"
        )
    contradiction = None
    rivals = sorted({e.errno for e in err.errors if e.errno in (2, 12, 24)})
    unnamed = not any(names_shared_memory(line) for line in lines) and not bus_only
    if unnamed and peak is not None and total and peak < 0.25 * total:
        contradiction = (
            f"no error line names a shared-memory file, and /dev/shm was at most {mib(peak)} of {mib(total)} used: "
            "a full disk or another file system gives the same 'No space left on device'"
        )
    elif rivals and peak is not None and total and peak < 0.25 * total:
        contradiction = (
            f"/dev/shm was at most {peak / total:.1%} used, and stderr also reports errno {', '.join(map(str, rivals))}"
        )
    elif bus_only and peak is not None and total and total >= 1 << 30 and peak < 0.05 * total:
        contradiction = (
            f"the only sign is a bus error, and /dev/shm was at most {mib(peak)} of {mib(total)} used: a bus error "
            "is as often a file-backed mapping (np.memmap, np.load(mmap_mode=...)) whose file shrank"
        )
    return Finding(
        confidence=0.9 if peak is not None and total and peak >= 0.5 * total else 0.75,
        summary=f"Shared memory (/dev/shm, {mib(total)}) ran out"
        + (
            ": main kept the batches it had received, and their shared memory with them."
            if kept is not None
            else " while workers passed batches to the main process."
        ),
        evidence=tuple(evidence),
        remedy=(
            "Main keeps the batches it received, and each kept batch keeps its shared memory: a list of batches, "
            "inputs or outputs that still reference them (a replay buffer, a debug cache). More --shm-size only "
            "delays the crash: keep copies instead (batch.clone(), a slice's .clone(), .item() for numbers) or drop "
            "the references."
            if kept is not None
            else "Give the job more shared memory: docker run --shm-size=8g (or --ipc=host); on Kubernetes mount an "
            "emptyDir with medium: Memory at /dev/shm; or lower batch_size × prefetch_factor × num_workers."
        ),
        pids=tuple(creators) or tuple(w.pid for w in facts.sample.workers),
        location=err.location,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_SHARING_STRATEGIES),
        contradiction=contradiction,
    )


@rule("shm_removed", SEVERITY_CRASH, 1, CRASH_AND_HANG)
def shm_removed(facts: Facts) -> Optional[Finding]:
    """A shared-memory file PyTorch still needed was deleted underneath the job: ENOENT (2) on a
    ``/torch_*`` object, or PyTorch's own ``shm_unlink`` of one failing (the main process then
    aborts; aten/src/ATen/MapAllocator.cpp) (systemd-logind's ``RemoveIPC``, logind.conf(5); a
    ``/dev/shm`` cleaner)."""
    err = stderr_facts(facts)
    lines = [e.line for e in err.errors if e.errno == 2 and e.shared_memory] + list(err.unlink_failures)
    if not lines:
        return None
    total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
    peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
    return Finding(
        confidence=0.85,
        summary="A shared-memory file of the job was deleted while still in use (No such file or directory on a "
        "/torch_* object, or PyTorch could not unlink one it made).",
        evidence=tuple(f"stderr: {line}" for line in lines[-2:])
        + (f"/dev/shm: peak use seen {mib(peak)} of {mib(total)}: it was not full{exit_clause(facts)}",),
        remedy=(
            "Something removes files from /dev/shm while the job runs: set RemoveIPC=no in /etc/systemd/logind.conf "
            "(when the job's user logs out), stop /dev/shm cleaners (tmpreaper, cron jobs), or use the "
            "file_descriptor sharing strategy."
        ),
        pids=tuple(w.pid for w in facts.sample.workers),
        location=err.location,
        docs=(DOC_SHARING_STRATEGIES,),
    )


@rule("disk_full", SEVERITY_CRASH, 1, CRASH_AND_HANG)
def disk_full(facts: Facts) -> Optional[Finding]:
    """A write failed with ENOSPC (28) on a file system other than ``/dev/shm``
    (:func:`enospc_errors`): the path the error names, or the file the traceback's frame
    writes. Who wrote decides what it is: a worker (its Dataset's cache or output: PyTorch's
    "Caught OSError in DataLoader worker process N") or main itself, whose own write is no
    DataLoader failure. ``/dev/shm``'s figures are quoted to keep ``--shm-size`` advice away."""
    err = stderr_facts(facts)
    found = [n for n in err.enospc if not n.shared_memory]
    if not found:
        return None
    line, block, path = found[0].line, found[0].block, found[0].path  # the first failed write: what failed
    # after it (a close, a flush) follows from it
    user = block.user() if block is not None else None
    source = ""
    if user is not None and block is not None:
        source = next((src for f, src in block.frames if f == user), "") or (facts.source(user.file, user.line) or "")
    in_worker = block is not None and (block.original or block.worker)
    worker_id = err.caught[-1].worker_id if in_worker and err.caught else None
    who = (
        f"DataLoader worker {worker_id}"
        if worker_id is not None
        else "A DataLoader worker"
        if in_worker
        else "The main process"
    )
    named = list(err.enospc_paths)
    what = f"the file {path}" if path else f"the file {named[0]}" if named else "a file the error does not name"
    where = f" at {frames.short_path(user.file)}:{user.line}" + (f" (`{source}`)" if source else "") if user else ""
    evidence = [f"stderr: {line}"]
    if user is not None:
        evidence.append(
            f"the write that failed: {user.file}:{user.line} in {user.function}" + (f": `{source}`" if source else "")
        )
    if not path:
        evidence.append(
            "the error names no file (a plain file.write(): Python's OSError carries no path), and its traceback does "
            "not run through PyTorch's shared-memory code: the file is the one that frame writes"
        )
    figures = [f for f in facts.file_systems if f[0] in named] or list(facts.file_systems)
    for p, folder, free, size in figures[:3]:
        evidence.append(
            f"{p if p in named else 'a folder the job still had files open in, ' + p}: its file system"
            + (f" (measured at {folder}, the nearest folder that exists)" if folder != p else "")
            + f" has {_size(free)} free of {_size(size)} now (statvfs at diagnosis time)"
        )
    for pid, targets in facts.open_files[:2]:
        regular = [t.path for t in targets if t.kind is FdKind.FILE]
        if regular:
            evidence.append(f"pid {pid}, still running, has open: {', '.join(regular[:5])} (/proc/{pid}/fd)")
    fs = next(((folder, free, size) for p, folder, free, size in figures if p in named), None)
    total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
    peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
    if total:
        evidence.append(f"/dev/shm (as the job sees it): peak use seen {mib(peak)} of {mib(total)}: not what filled up")
    views = [v for v in (facts.inside.loaders if facts.inside else ())]
    if not in_worker and views:
        delivered = sum(v.batches for v in views)
        evidence.append(f"the DataLoader delivered {delivered} batch(es) (the inside view): the loader was working")
    evidence.append(f"{'the worker' if in_worker else 'main'} raised it{exit_clause(facts)}")
    now = f" ({_size(fs[1])} free of {_size(fs[2])} now)" if fs is not None else ""
    free_on = (
        f"Free space on the file system of {fs[0]} ({_size(fs[1])} free of {_size(fs[2])} at diagnosis time)"
        if fs is not None
        else "Free space on the file system that holds that file (`df -h` on its folder)"
    )
    if in_worker:
        summary = f"{who} could not write {what}{where}: its file system is full{now} (not /dev/shm)."
        remedy = (
            free_on + ", or write it elsewhere: a "
            "cache the Dataset fills grows with every sample it has seen, in every worker; bound it (evict old "
            "entries) or keep it in memory. Giving the job more shared memory does not help: /dev/shm was not full."
        )
    else:
        summary = (
            f"The main process could not write {what}{where}: its file system is full{now}. This is main's own "
            "error, not a DataLoader failure."
        )
        remedy = (
            free_on + " (logs, checkpoints), rotate or bound what main writes, or write it elsewhere. The DataLoader "
            "is not involved; /dev/shm was not full."
        )
    return Finding(
        confidence=0.85 if (path or user is not None) else 0.7,
        summary=summary,
        evidence=tuple(evidence),
        remedy=remedy,
        pids=(
            (facts.sample.main.pid,)
            if facts.sample.main and not in_worker
            else tuple(w.pid for w in facts.sample.workers)
        ),
        location=f"{user.file}:{user.line}" if user is not None else err.location,
        docs=(DOC_DATALOADER,) if in_worker else (),
    )


@rule("fd_exhausted", SEVERITY_CRASH, 2, CRASH_AND_HANG)
def fd_exhausted(facts: Facts) -> Optional[Finding]:
    """File descriptors exhausted (EMFILE, 24): under the ``file_descriptor`` sharing strategy
    one fd per shared tensor storage, in the process that hit its RLIMIT_NOFILE (pytorch/pytorch#973, #11201)."""
    err = stderr_facts(facts)
    lines = err.errno_lines({24})
    if not lines:
        return None
    hot = _near_limit(facts, lambda p: p.num_fds, lambda p, s: p.rlimit_nofile_soft)
    evidence = [f"stderr: {line}" for line in lines[-2:]]
    censuses = _fd_censuses(facts, [pid for _, pid, _, _ in hot] if hot else None)
    for pid, census in censuses[:4]:
        kinds = ", ".join(f"{n} {kind.value}" for kind, n in census.kinds)
        folders = "; ".join(f"{n} in {folder}" for folder, n in census.files)
        evidence.append(
            f"pid {pid}: of {census.read} descriptors read near the limit: {kinds}"
            + (f" (regular files: {folders})" if folders else "")
        )
    files = [(pid, c) for pid, c in censuses if c.count(FdKind.FILE) * 2 > c.read]
    if hot:
        for role, pid, used, limit in hot[:4]:
            evidence.append(
                f"{role} pid {pid}: {used} open file descriptors of RLIMIT_NOFILE {limit} at its last sample"
            )
        who = _who(hot)
        limits = sorted({limit for *_, limit in hot})
        summary = f"{who} ran out of file descriptors (RLIMIT_NOFILE {', '.join(map(str, limits))})" + (
            "" if files else " passing shared tensors between processes"
        )
        pids = tuple(pid for _, pid, _, _ in hot)
    else:
        peak = max_over_timeline(facts, lambda s: max((p.num_fds or 0) for p in s.processes) if s.processes else None)
        evidence.append(
            f"the highest descriptor count seen in any process was {peak} (the limit was hit between "
            f"samples){exit_clause(facts)}"
        )
        summary = "A process of the job ran out of file descriptors (Too many open files)" + (
            "" if files else " passing shared tensors"
        )
        pids = tuple(p.pid for p in facts.sample.processes if p.role in (ROLE_MAIN, ROLE_WORKER))
    remedy = (
        'Call torch.multiprocessing.set_sharing_strategy("file_system") at the start of the program, or raise the '
        "limit (ulimit -n 65536; Docker --ulimit nofile=65536:65536; do not lower it in the job); return fewer, "
        "larger tensors per sample, and do not keep many batches alive in main."
    )
    summary += "."
    fix: Optional[Fix] = Fix(sharing_strategy="file_system")
    if files:
        fix = None  # the Dataset's own files: only closing them helps
        pid, census = files[0]
        where = census.files[0][0] if census.files else "the job's files"
        summary = (
            f"{summary[:-1]}: most of the descriptors were regular files the job opened and kept open "
            f"({census.count(FdKind.FILE)} of {census.read} in pid {pid}, most in {where})."
        )
        remedy = (
            f"Close the files the Dataset opens (under {where}): open them in a `with` block in __getitem__, or "
            "keep one handle per file and reuse it, instead of opening one per sample and keeping it; each worker "
            "holds its own descriptors. A higher limit (ulimit -n) or another sharing strategy only delays this."
        )
    return Finding(
        confidence=0.9,
        summary=summary,
        evidence=tuple(evidence),
        remedy=remedy,
        pids=pids,
        location=err.location,
        docs=(DOC_DATALOADER,) if files else (DOC_SHARING_STRATEGIES,),
        fix=fix,
    )


def _fd_censuses(facts: Facts, pids: Optional[Sequence[int]]) -> List[Tuple[int, FdCensus]]:
    """The last descriptor census (``ProcessSample.fd_census``) of each of ``pids`` (every
    process when ``None``) in the timeline, most descriptors first."""
    last: Dict[int, FdCensus] = {}
    for s in facts.timeline:
        for p in s.processes:
            if p.fd_census is not None and (pids is None or p.pid in pids):
                last[p.pid] = p.fd_census
    return sorted(last.items(), key=lambda kv: -kv[1].read)


@rule("map_count_exhausted", SEVERITY_CRASH, 2, CRASH_AND_HANG)
def map_count_exhausted(facts: Facts) -> Optional[Finding]:
    """``mmap`` failed with ENOMEM (12): each shared tensor received from a worker is one
    mapping in main, and a process may have at most ``vm.max_map_count`` (65530 by default;
    pytorch/pytorch#92134, #60626)."""
    err = stderr_facts(facts)
    lines = [line for line in err.errno_lines({12}) if "mmap" in line or "shared memory" in line]
    if not lines:
        return None
    hot = _near_limit(facts, lambda p: p.map_count, lambda p, s: s.host.max_map_count)
    peak = max_over_timeline(facts, lambda s: max((p.map_count or 0) for p in s.processes) if s.processes else None)
    limit = max_over_timeline(facts, lambda s: s.host.max_map_count)
    evidence = [f"stderr: {line}" for line in lines[-2:]]
    evidence += [
        f"{role} pid {pid}: {used} memory mappings of vm.max_map_count {lim} at its last sample"
        for role, pid, used, lim in hot[:3]
    ]
    if not hot:
        evidence.append(f"highest map count seen: {peak} of vm.max_map_count {limit}")
    avail = max_over_timeline(facts, lambda s: -s.host.mem_left_bytes)
    if avail is not None:
        evidence.append(f"lowest memory left to the job seen: {mib(-avail)}{exit_clause(facts)}")
    near = bool(hot) or (peak is not None and limit and peak >= 0.75 * limit)
    who = _who(hot) if hot else "a process of the job"
    return Finding(
        confidence=0.9 if near else 0.5,
        summary=f"{who} ran out of memory mappings (vm.max_map_count {limit}): every shared tensor it keeps alive is "
        "one mapping.",
        evidence=tuple(evidence),
        remedy=(
            "Do not keep received batches alive (copy what you cache: tensor.clone(), or .numpy().copy(), frees the "
            "shared mapping); batch more samples per tensor; or raise the limit: sysctl -w vm.max_map_count=262144."
        ),
        pids=tuple(pid for _, pid, _, _ in hot) or ((facts.sample.main.pid,) if facts.sample.main else ()),
        location=err.location,
        docs=(DOC_SHARING_STRATEGIES, "https://github.com/pytorch/pytorch/issues/92134"),
        contradiction=None
        if near or peak is None
        else f"the highest map count seen was {peak} of {limit}: memory itself ran out, not mappings",
    )


@rule("shm_leaked", SEVERITY_WARNING, 60, (MODE_CRASH, MODE_EXIT))
def shm_leaked(facts: Facts) -> Optional[Finding]:
    """After the job ended, files its processes created in ``/dev/shm`` (``torch_<pid>_…``,
    the ``file_system`` sharing strategy) are still there and hold shared memory until removed."""
    if not facts.shm_leftovers:
        return None
    total = sum(size for _, size in facts.shm_leftovers)
    pids = sorted({int(name.split("_")[1]) for name, _ in facts.shm_leftovers})
    patterns = " ".join(f"/dev/shm/torch_{pid}_*" for pid in pids[:8])
    return Finding(
        confidence=0.95,
        summary=f"The job left {len(facts.shm_leftovers)} file(s) ({mib(total)}) in /dev/shm; they hold shared memory "
        "until removed.",
        evidence=tuple(f"/dev/shm/{name}: {size} bytes allocated" for name, size in facts.shm_leftovers[:5])
        + (f"… and {len(facts.shm_leftovers) - 5} more",) * (len(facts.shm_leftovers) > 5)
        + (f"created by pid(s) {', '.join(map(str, pids))} of this job (the pid is in each name){exit_clause(facts)}",),
        remedy=f"Remove them once no process of the job runs: rm -f {patterns}",
        pids=tuple(pids),
        docs=(DOC_SHARING_STRATEGIES,),
    )
