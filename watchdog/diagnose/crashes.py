"""Crash rules: the job (or a worker) died, and PyTorch said why on stderr.

They read PyTorch's own error text in the stderr tail together with what the timeline saw of
the processes, and fire in ``crash`` mode (the job exited) and most of them in ``hang`` mode
too (an exhausted resource explains a lost batch). Errors that carry an errno are classified
by it, not by their wording (NOTE [ Errno classes ]). Messages matched, from
torch/utils/data/dataloader.py (``_try_get_data``), torch/utils/data/_utils/signal_handling.py
and torch/csrc/DataLoader.cpp (worker signal handlers), aten/src/ATen/MapAllocator.cpp
("unable to open shared memory object", "unable to mmap"), torch/utils/data/_utils/worker.py
(``ExceptionWrapper``: "Caught X in DataLoader worker process N" and "Original Traceback"),
torch/cuda (lazy init), and CPython multiprocessing.

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

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .. import frames
from ..types import (
    MODE_CRASH,
    MODE_EXIT,
    MODE_HANG,
    ROLE_MAIN,
    ROLE_WORKER,
    SEVERITY_CRASH,
    SEVERITY_WARNING,
    Facts,
    FdCensus,
    FdKind,
    Fix,
    Frame,
    ProcId,
    WorkerFailure,
)
from .common import (
    DOC_CUDA_FORK,
    DOC_DATALOADER,
    DOC_MULTI_PROCESS_LOADING,
    DOC_MULTIPROCESSING,
    DOC_SHARING_STRATEGIES,
    DOC_START_METHODS,
    SPAWN,
    STAGE_COLLATE,
    STAGE_DATASET,
    STAGE_WORKER_INIT,
    TracebackBlock,
    fatal_error_dump,
    fit_line,
    last_seen_at,
    max_over_timeline,
    memory_points,
    mib,
    original_traceback,
    seconds,
    since_last_drop,
    stderr_lines,
    stderr_traceback_blocks,
    traceback_location,
)
from .engine import Finding, rule
from .loaders import kept_loaders_text, kept_persistent_loaders, live_iterator_evidence

CRASH_AND_HANG = (MODE_CRASH, MODE_HANG)
CRASH = (MODE_CRASH,)

_ERRNO = re.compile(r"\((\d+)\)\s*$|\[Errno (\d+)\]")
# Lines where PyTorch or Python report a failed shared-memory or descriptor operation.
_RESOURCE_LINE = re.compile(
    r"shared memory|/torch_|unable to mmap|unable to write to file|unable to resize file|Too many open files|"
    r"received 0 items of ancdata|No space left on device|Unexpected bus error|killed by signal: Bus error|"
    r"\[Errno \d+\]"
)
_SIGBUS = re.compile(r"Unexpected bus error|killed by signal: Bus error|insufficient shared memory", re.I)
_KILLED = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (?:is killed by signal: ([^.]+)\.|exited unexpectedly)"
)
# A native abort's own words on stderr: glibc's assert(), libstdc++'s terminate handler, CPython.
_ASSERTION = re.compile(r"Assertion [`'].*failed|terminate called after throwing.*|what\(\): .*|Fatal Python error: .*")
_NATIVE_SIGNAL = re.compile(
    r"ERROR: Unexpected (segmentation fault|floating-point exception|bus error) encountered in worker"
)
_START = re.compile(
    r"Can't pickle local object|Can't pickle <|cannot pickle '[^']+' object"
    r"|Can't get attribute '[^']+' on <module '(?:__main__|__mp_main__)'"
    r"|An attempt has been made to start a new process before|daemonic processes are not allowed to have children"
)
_PICKLE = re.compile(r"[Cc]an't pickle|cannot pickle")
# A pickling error counts as a start failure only on the process-start path (Process.start ->
# Popen._launch -> reduction.dump in popen_spawn_posix.py / popen_forkserver.py).
_START_PATH = re.compile(r"popen_(?:spawn|forkserver)_posix\.py|popen_forkserver\.py|in _launch\b")
# A spawned (or forkserver) worker that could not unpickle what main sent it: the class is not
# an attribute of the module the worker imported (multiprocessing/spawn.py ``_main`` runs
# ``pickle.load``; spawn re-imports the main script as ``__mp_main__``, or by its module name
# under ``python -m``).
_UNPICKLE = re.compile(r"Can't get attribute '(?P<attr>[^']+)' on <module '(?P<module>[^']+)'")
# PyTorch's SIGCHLD handler (torch/csrc/DataLoader.cpp) on a worker that exited with a code.
_EXIT_CODE = re.compile(r"DataLoader worker \(pid (\d+)\) exited unexpectedly with exit code (\d+)")
# Main failed to take a batch's shared tensor from the worker that sent it: with the
# file_descriptor sharing strategy the fd is passed through that worker's resource sharer
# (torch/multiprocessing/reductions.py rebuild_storage_fd, Lib/multiprocessing/resource_sharer.py),
# so a worker that ended right after sending leaves main a refused or reset connection instead of
# PyTorch's "exited unexpectedly".
_LOST_RECEIVE = re.compile(
    r"in rebuild_storage_fd\b[\s\S]*?^(?:ConnectionResetError|ConnectionRefusedError|FileNotFoundError|EOFError)\b",
    re.M,
)
# A thread or process could not be created: pthread_create or fork failed with EAGAIN (CPython:
# "can't start new thread"; os.fork / subprocess: "[Errno 11] Resource temporarily unavailable").
_EAGAIN = re.compile(
    r"can't start new thread|\[Errno 11\] Resource temporarily unavailable|Resource temporarily unavailable"
)
_CUDA_FORK = re.compile(r"Cannot re-initialize CUDA in forked subprocess")
_TIMED_OUT = re.compile(r"DataLoader timed out after (\d+(?:\.\d+)?) seconds")
_CAUGHT = re.compile(r"Caught (\w+(?:\.\w+)*) in DataLoader worker process (\d+)")

# Share of RLIMIT_NOFILE / vm.max_map_count at which a process counts as having hit it.
NEAR_LIMIT = 0.9


def _exit(facts: Facts) -> str:
    return "" if facts.exit_code is None else f"; the job exited with code {facts.exit_code}"


def errno_of(line: str) -> Optional[int]:
    """The errno a PyTorch or Python error line ends with (``… (24)``, ``[Errno 24]``), or ``None``."""
    m = _ERRNO.search(line)
    return int(m.group(1) or m.group(2)) if m else None


def resource_errors(stderr: str) -> List[Tuple[str, Optional[int]]]:
    """``(line, errno)`` for each stderr line that reports a failed shared-memory, mapping or
    descriptor operation (NOTE [ Errno classes ]), in order."""
    out = []
    for line in stderr.splitlines():
        if _RESOURCE_LINE.search(line):
            code = errno_of(line)
            if code is None and ("Too many open files" in line or "ancdata" in line):
                code = 24
            elif code is None and "No space left on device" in line:
                code = 28
            out.append((line.strip(), code))
    return out


def _errors_with(facts: Facts, codes) -> List[str]:
    return [line for line, code in resource_errors(facts.stderr_tail) if code in codes]


_SHM_OBJECT = re.compile(r"/torch_|shared memory|\(shm\)|/dev/shm")
_QUOTED_PATH = re.compile(r"['\"<](/[^'\">]*)['\">]")


def names_shared_memory(line: str) -> bool:
    """Whether an error line is about a shared-memory object: a ``/torch_…`` segment
    (aten/src/ATen/MapAllocator.cpp), "shared memory", or a path under ``/dev/shm``."""
    return bool(_SHM_OBJECT.search(line))


# Frames of PyTorch's shared-memory path: a storage moved to or created in shared memory
# (torch/storage.py ``_new_shared``, ``_share_fd_cpu_``, ``share_memory_``) for a queue
# (torch/multiprocessing/reductions.py).
_SHM_FRAMES = ("torch/storage.py", "torch/multiprocessing/reductions.py", "torch/_tensor.py")


def enospc_errors(stderr: str) -> List[Tuple[str, bool, Optional[TracebackBlock]]]:
    """``(line, on_shared_memory, traceback block or None)`` for each ENOSPC (28) error line
    of ``stderr``, in order (NOTE [ Errno classes ]). A line names its file or not: a
    ``/torch_…`` segment or a path under ``/dev/shm`` is shared memory, another path a file
    system of its own. A line with no path (a plain ``file.write()``: ``OSError: [Errno 28] No
    space left on device``) is shared memory only when its traceback runs through PyTorch's
    shared-memory code (``_SHM_FRAMES``); with a traceback that does not, it is the file the
    frame writes, on another file system; with no traceback at all it stays undecided
    (``None`` in place of the block, and shared memory is assumed, for the figures to judge)."""
    blocks, _ = stderr_traceback_blocks(stderr)
    by_line: Dict[str, TracebackBlock] = {}
    for b in blocks:
        if b.exception:
            by_line.setdefault(b.exception, b)  # the first: a chained traceback's cause comes first
    out: List[Tuple[str, bool, Optional[TracebackBlock]]] = []
    for line, code in resource_errors(stderr):
        if code != 28:
            continue
        block = by_line.get(line)
        if names_shared_memory(line):
            out.append((line, True, block))
        elif _QUOTED_PATH.search(line):
            out.append((line, False, block))
        elif block is not None and block.frames:
            shm = any(frames.normalise_path(f.file).endswith(_SHM_FRAMES) for f, _ in block.frames)
            out.append((line, shm, block))
        else:
            out.append((line, True, None))
    return out


_LITERAL_PATH = re.compile(r"""(?<![\w.])[rbf]{0,2}['"](/[^'"\s]{1,4095})['"]""")


def enospc_paths(stderr: str) -> List[str]:
    """Absolute paths of the files the ENOSPC errors of ``stderr`` that are not shared memory
    (:func:`enospc_errors`) failed to write, in order, each once: the path the error names
    (``[Errno 28] No space left on device: '/data/x'``), else a string literal that is an
    absolute path in the source line of the traceback's own frame (``open("/scratch/c.bin",
    "wb")``). A path built at run time (``os.path.join(folder, …)``) is not known."""
    out: List[str] = []
    for line, shm, block in enospc_errors(stderr):
        if shm:
            continue
        named = _QUOTED_PATH.search(line)
        found = [named.group(1)] if named else []
        if not found and block is not None:
            user = block.user()
            src = next((text for f, text in block.frames if f == user), "") if user is not None else ""
            found = [m.group(1) for m in _LITERAL_PATH.finditer(src or "")]
        out += [p for p in found if "\0" not in p and p not in out]
    return out


def _size(n: float) -> str:
    """Bytes as ``812.0 MiB`` or, from 1 GiB on, ``23.4 GiB``."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else mib(n)


def _shm_full_lines(stderr: str) -> List[str]:
    """ENOSPC lines about shared memory (:func:`enospc_errors`: named, reached through
    PyTorch's shared-memory code, or undecided), and bus errors (NOTE [ Errno classes ]);
    ``[Errno 28] … '/data/cache/x'`` and a plain ``file.write()`` are a full disk, left out."""
    lines = [line for line, shm, _ in enospc_errors(stderr) if shm]
    return lines + [line.strip() for line in stderr.splitlines() if _SIGBUS.search(line)]


def is_loader_resource_error(line: str) -> bool:
    """Whether an exception line is one of the loader's resource errors that a rule of its own
    explains (NOTE [ Errno classes ]): any EMFILE or ENOSPC (``shm_exhausted`` or
    ``disk_full``), a bus error, or ENOENT / ENOMEM on shared memory."""
    if _SIGBUS.search(line):
        return True
    for _, code in resource_errors(line):
        if code in (24, 28) or (code in (2, 12) and names_shared_memory(line)):
            return True
    return False


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


_PAGE = 4096  # the page size mappings are rounded to (x86-64, arm64 with 4 KiB pages)


def truncated_mappings(facts: Facts, pids: Optional[Sequence[int]] = None) -> List[Tuple[int, str, int, int]]:
    """``(pid, path, bytes mapped up to, size now)`` of each data file a process (of ``pids``,
    or any worker) had mapped at its last sample that is now, as the same file (inode), shorter
    than the mapping reached, past page rounding (``ProcessSample.mapped_files`` against
    ``Facts.mapped_file_sizes``): a page past a file's end raises SIGBUS when touched (mmap(2):
    "Attempted access to a page of the buffer that lies beyond the end of the mapped file"). A
    file deleted or replaced by another (``os.replace``) keeps the mapped pages: not counted."""
    now = {path: (size, ino) for path, size, ino in facts.mapped_file_sizes}
    last: Dict[int, Tuple[Tuple[str, int, int], ...]] = {}
    for s in facts.timeline:
        for p in s.processes:
            if p.mapped_files and ((pids is None and p.role is ROLE_WORKER) or (pids and p.pid in pids)):
                last[p.pid] = p.mapped_files
    out = []
    for pid, files in sorted(last.items()):
        for path, extent, ino in files:
            size, ino_now = now.get(path, (None, None))
            if size is not None and ino_now == ino and -(-size // _PAGE) * _PAGE < extent:
                out.append((pid, path, extent, size))
    return out


# A worker whose RSS rose at least STEP_MIN_BYTES at STEP_RATE or faster (bytes/s) just before it
# died, after its memory stood still, was ended by one allocation: one sample asked for that much
# at once (a size read from a corrupt header), not a cache that grows sample by sample. The
# growth before the rise may explain at most STEP_FLAT_SHARE of it.
STEP_MIN_BYTES = 128 * 2**20
STEP_RATE = 256 * 2**20
STEP_FLAT_SHARE = 0.25


@dataclass(frozen=True)
class MemoryStep:
    """One allocation that ended a process (:func:`memory_step`): ``asked`` bytes at least, on top
    of ``before`` bytes of RSS it held flat for ``flat_s`` seconds; ``span_s`` the seconds the rise
    took between the samples around it, ``seen`` whether the timeline saw the rise (else it is
    the cgroup's headroom at the process's last sample, ``span_s`` then the time from that sample
    to the next one without it); ``one_read`` whether the inside view's counts show the rise
    came while it read one sample."""

    asked: float
    before: float
    flat_s: float
    span_s: float
    seen: bool
    one_read: bool = False


def _rss_points(facts: Facts, pid: int) -> List[Tuple[float, float]]:
    """``(t_mono, RSS bytes)`` of ``pid`` at each sample that read its memory."""
    return [
        (s.t_mono, float(p.rss_bytes))
        for s in facts.timeline
        for p in [s.process(pid)]
        if p is not None and p.rss_bytes > 1
    ]


def _reading_since(facts: Facts, pid: int) -> Optional[float]:
    """When ``pid`` reached for the sample it was still reading at its last count
    (``WorkerFetch.last_mono`` in the timeline's ``Sample.fetches``, ``time.monotonic()``
    seconds, the sampler's clock too), or ``None`` without the inside view's counts."""
    last = None
    for s in facts.timeline:
        for f in s.fetches:
            if f.pid == pid and f.last_mono is not None:
                last = f.last_mono
    return last


def memory_step(facts: Facts, pid: int, limit: Optional[float]) -> Optional[MemoryStep]:
    """Whether ``pid`` died of one sudden allocation, from its RSS over the timeline (read every
    sample, unlike USS): its RSS rose by ``STEP_MIN_BYTES`` or more while it read one sample
    (after it reached for the sample it was on: :func:`_reading_since`), or, without the inside
    view's counts, at ``STEP_RATE`` or faster at its last samples; and before that it stood
    (nearly) still: a step, not a slope. When the rise came between its last sample and its
    death, unseen, the memory cgroup's headroom then (``limit`` less the cgroup's usage) is
    what the allocation asked for at least, when that is large and the process was still.
    ``None`` otherwise (a steady growth, too few samples)."""
    pts = _rss_points(facts, pid)
    if len(pts) < 3:
        return None
    end = len(pts) - 1
    since = _reading_since(facts, pid)
    if since is not None:
        b = max((i for i, (t, _) in enumerate(pts) if t <= since), default=-1)
        if b < 0:
            return None
    else:
        b = end
        while b > 0 and (pts[b][1] - pts[b - 1][1]) >= STEP_RATE * max(pts[b][0] - pts[b - 1][0], 1e-3):
            b -= 1
    flat = pts[max(0, b - 10) : b + 1]  # up to 10 samples before the rise
    flat_s = flat[-1][0] - flat[0][0]
    if len(flat) < 2 or flat_s <= 0:
        return None
    rate = max(0.0, (flat[-1][1] - flat[0][1]) / flat_s)
    if b < end:
        asked, span = pts[end][1] - pts[b][1], pts[end][0] - (since if since is not None else pts[b][0])
        if asked >= STEP_MIN_BYTES and rate * (pts[end][0] - pts[b][0]) <= STEP_FLAT_SHARE * asked:
            return MemoryStep(asked, pts[b][1], flat_s, max(span, 0.0), True, since is not None)
        return None
    if not limit or not facts.oom_kills:
        return None
    t_last = pts[end][0]
    at = next((s for s in facts.timeline if s.t_mono == t_last), None)
    used = at.host.mem_cgroup_usage_bytes if at is not None else None
    after = next((s.t_mono for s in facts.timeline if s.t_mono > t_last and s.process(pid) is None), None)
    if used is None or after is None:
        return None
    headroom = limit - used
    gap = after - t_last
    if headroom >= STEP_MIN_BYTES and rate * max(gap, flat_s) <= STEP_FLAT_SHARE * headroom:
        return MemoryStep(headroom, pts[end][1], flat_s, gap, False, False)
    return None


def _worker_batch(facts: Facts, pid: int) -> Optional[str]:
    """The batch ``pid`` was computing when it died, when the inside view tells: main waited for
    a batch that worker owns (a worker fetches its batches in order, so the one main waits for
    is the one it was on), with its samples when the sampler is a ``SequentialSampler``."""
    for v in reversed(facts.inside.loaders if facts.inside else ()):
        if pid in v.workers and v.waiting_since is not None and v.waiting_worker == v.workers.index(pid):
            size = v.setting("batch_size")
            if v.setting("sampler") == "SequentialSampler" and isinstance(size, int) and size > 0:
                first = v.waiting_idx * size
                return f"batch {v.waiting_idx} (samples {first}–{first + size - 1}), which main waited for"
            return f"batch {v.waiting_idx}, which main waited for (the sampler shuffles: log the indices to find it)"
    return None


def _step_evidence(facts: Facts, pid: int, step: MemoryStep, limit: Optional[float]) -> str:
    """The evidence line of a :class:`MemoryStep` of ``pid``."""
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if pid in v.workers]
    p50 = views[-1].interval_p50_s if views else None
    batch = f" (one batch takes about {seconds(p50)})" if p50 else ""
    if step.seen:
        return (
            f"worker pid {pid}: RSS stood at {mib(step.before)} for {seconds(step.flat_s)}, then rose by "
            f"{mib(step.asked)} within {seconds(step.span_s)}"
            + (" while it read one sample (its count of samples reached for stood still)" if step.one_read else "")
            + f"{batch} just before it died: a step, not a slope"
        )
    return (
        f"worker pid {pid}: RSS stood at {mib(step.before)} for {seconds(step.flat_s)} up to its last sample, when "
        f"the memory cgroup had {mib(step.asked)} left of its {mib(limit)} limit; {seconds(step.span_s)} later it was "
        f"gone: one allocation took more than that at once{batch}"
    )


def _memory_remedy(facts: Facts, pids: Sequence[int], limit: Optional[float]) -> str:
    """What to change for a worker the OOM killer ended, from the figures: a worker that wrote
    more private memory than main holds at all allocated it itself (a per-worker cache,
    buffers kept across samples); one near main's own size copied main's Python objects
    (copy-on-read); the limit in force is the cgroup's when there is one."""
    main = facts.sample.main
    main_uss = main.uss_bytes if main is not None else None
    wrote = [w for w in (written_last(facts, pid) for pid in pids) if w is not None]
    peak = max(wrote) if wrote else None
    if peak is not None and main_uss and peak > main_uss:
        cause = (
            f"Each worker's own allocations grew (up to {mib(peak)} written, more than main's whole {mib(main_uss)}): "
            "a per-worker cache or buffers kept across samples. Bound it (an LRU of fixed size, or cache on disk), "
            "or build the cache once in main before the workers start"
        )
    else:
        cause = (
            "Lower what each worker holds: copy-on-read of the Dataset's Python objects (keep its metadata in numpy "
            "arrays/tensors, not lists/dicts), a per-worker cache (bound it)"
        )
    where = f"the cgroup's {mib(limit)} limit" if limit else "the memory limit"
    return (
        f"{cause}; or lower num_workers or batch_size × prefetch_factor, or raise {where}. Check "
        "`dmesg | grep -i -e oom -e killed`."
    )


def memory_age(facts: Facts, pid: int) -> str:
    """How old the slow-cadence memory figures (USS, private dirty) of ``pid``'s last sample
    were when it was last seen: ``" (USS and private dirty read 18 s before)"``, or ``""`` when
    they were read at that sample or never. They are read every ``full_info_interval_s``, and
    less often while a process's memory stays still (watchdog.collect.sampler), so a figure
    quoted at a kill may predate the growth that caused it."""
    for s in reversed(facts.timeline):
        p = s.process(pid)
        if p is not None and p.rss_bytes > 0:
            if p.memory_read_mono is None or s.t_mono - p.memory_read_mono < 1.0:
                return ""
            return f" (USS and private dirty read {s.t_mono - p.memory_read_mono:.0f} s before; RSS at that sample)"
    return ""


def written_last(facts: Facts, pid: int) -> Optional[int]:
    """The private dirty memory (else USS) ``pid`` had at its last sample with one, bytes."""
    found = None
    for s in facts.timeline:
        p = s.process(pid)
        if p is not None and (p.dirty_bytes is not None or p.uss_bytes is not None):
            found = p.dirty_bytes if p.dirty_bytes is not None else p.uss_bytes
    return found


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


def _bus_error_only(facts: Facts) -> bool:
    """Whether the only sign of shared memory running out is a bus error (no ENOSPC)."""
    return not any(code == 28 for _, code in resource_errors(facts.stderr_tail)) and bool(
        _SIGBUS.search(facts.stderr_tail or "")
    )


@rule("shm_exhausted", SEVERITY_CRASH, 1, CRASH_AND_HANG)
def shm_exhausted(facts: Facts) -> Optional[Finding]:
    """``/dev/shm`` full: workers put every batch's tensors in shared memory (PyTorch's
    multi-process data loading notes; Docker's default is 64 MB):
    ENOSPC (28), or a bus error when a page of a full tmpfs is first touched."""
    lines = _shm_full_lines(facts.stderr_tail)
    if not lines:
        return None
    bus_only = _bus_error_only(facts)
    if bus_only and truncated_mappings(facts):
        return None  # a file-backed mapping lost its file's pages: worker_killed says which
    total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
    peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
    evidence = [f"stderr: {line}" for line in lines[-2:]]
    creators = sorted({int(pid) for pid in re.findall(r"torch_(\d+)_", facts.stderr_tail)})
    if creators:
        evidence.append(
            f"the failing shared-memory segments were being created by pid {', '.join(map(str, creators))} "
            "(torch_<pid>_… names)"
        )
    evidence.append(
        f"/dev/shm (as the job sees it): {mib(total)} in all, peak use seen {mib(peak)} at the sampling interval "
        f"(a batch's allocation that does not fit fails between samples){_exit(facts)}"
    )
    kept = _shm_kept(facts, total)
    if kept is not None:
        gained, span, slope = kept
        evidence.append(
            f"/dev/shm use grew in a straight line for {span:.0f} s (+{mib(gained)}, {slope / 2**20:.1f} MiB/s) and "
            "never fell back: batches that were delivered kept their shared memory (something in main holds them)"
        )
    contradiction = None
    rivals = sorted({code for _, code in resource_errors(facts.stderr_tail) if code in (2, 12, 24)})
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
        location=traceback_location(facts.stderr_tail),
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_SHARING_STRATEGIES),
        contradiction=contradiction,
    )


@rule("shm_removed", SEVERITY_CRASH, 1, CRASH_AND_HANG)
def shm_removed(facts: Facts) -> Optional[Finding]:
    """A shared-memory file PyTorch still needed was deleted underneath the job: ENOENT (2) on a
    ``/torch_*`` object (systemd-logind's ``RemoveIPC``, logind.conf(5); a ``/dev/shm`` cleaner)."""
    lines = [line for line in _errors_with(facts, {2}) if names_shared_memory(line)]
    if not lines:
        return None
    total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
    peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
    return Finding(
        confidence=0.85,
        summary="A shared-memory file of the job was deleted while still in use (No such file or directory on a "
        "/torch_* object).",
        evidence=tuple(f"stderr: {line}" for line in lines[-2:])
        + (f"/dev/shm: peak use seen {mib(peak)} of {mib(total)}: it was not full{_exit(facts)}",),
        remedy=(
            "Something removes files from /dev/shm while the job runs: set RemoveIPC=no in /etc/systemd/logind.conf "
            "(when the job's user logs out), stop /dev/shm cleaners (tmpreaper, cron jobs), or use the "
            "file_descriptor sharing strategy."
        ),
        pids=tuple(w.pid for w in facts.sample.workers),
        location=traceback_location(facts.stderr_tail),
        docs=(DOC_SHARING_STRATEGIES,),
    )


@rule("disk_full", SEVERITY_CRASH, 1, CRASH_AND_HANG)
def disk_full(facts: Facts) -> Optional[Finding]:
    """A write failed with ENOSPC (28) on a file system other than ``/dev/shm``
    (:func:`enospc_errors`): the path the error names, or the file the traceback's frame
    writes. Who wrote decides what it is: a worker (its Dataset's cache or output: PyTorch's
    "Caught OSError in DataLoader worker process N") or main itself, whose own write is no
    DataLoader failure. ``/dev/shm``'s figures are quoted to keep ``--shm-size`` advice away."""
    found = [(line, block) for line, shm, block in enospc_errors(facts.stderr_tail or "") if not shm]
    if not found:
        return None
    line, block = found[0]  # the first failed write; what failed after it (a close, a flush) follows from it
    path = _QUOTED_PATH.search(line)
    user = block.user() if block is not None else None
    source = ""
    if user is not None and block is not None:
        source = next((src for f, src in block.frames if f == user), "") or (facts.source(user.file, user.line) or "")
    caught = list(_CAUGHT.finditer(facts.stderr_tail or ""))
    in_worker = block is not None and (block.original or block.worker)
    worker_id = caught[-1].group(2) if in_worker and caught else None
    who = (
        f"DataLoader worker {worker_id}"
        if worker_id is not None
        else "A DataLoader worker"
        if in_worker
        else "The main process"
    )
    named = enospc_paths(facts.stderr_tail or "")
    what = (
        f"the file {path.group(1)}" if path else f"the file {named[0]}" if named else "a file the error does not name"
    )
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
        regular = [t for t in targets if t.startswith("/") and not t.startswith(("/dev/", "/proc/", "/sys/"))]
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
    evidence.append(f"{'the worker' if in_worker else 'main'} raised it{_exit(facts)}")
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
        location=f"{user.file}:{user.line}" if user is not None else traceback_location(facts.stderr_tail),
        docs=(DOC_DATALOADER,) if in_worker else (),
    )


@rule("fd_exhausted", SEVERITY_CRASH, 2, CRASH_AND_HANG)
def fd_exhausted(facts: Facts) -> Optional[Finding]:
    """File descriptors exhausted (EMFILE, 24): under the ``file_descriptor`` sharing strategy
    one fd per shared tensor storage, in the process that hit its RLIMIT_NOFILE (pytorch/pytorch#973, #11201)."""
    lines = _errors_with(facts, {24})
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
            f"samples){_exit(facts)}"
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
        location=traceback_location(facts.stderr_tail),
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
    lines = [line for line in _errors_with(facts, {12}) if "mmap" in line or "shared memory" in line]
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
        evidence.append(f"lowest memory left to the job seen: {mib(-avail)}{_exit(facts)}")
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
        location=traceback_location(facts.stderr_tail),
        docs=(DOC_SHARING_STRATEGIES, "https://github.com/pytorch/pytorch/issues/92134"),
        contradiction=None
        if near or peak is None
        else f"the highest map count seen was {peak} of {limit}: memory itself ran out, not mappings",
    )


def _signal_words(number: int) -> str:
    """A signal number as ``strsignal(3)`` words, the way PyTorch names it ("Killed")."""
    import signal as signals

    try:
        return signals.strsignal(number) or f"signal {number}"
    except ValueError:
        return f"signal {number}"


def worker_ends(facts: Facts) -> Dict[int, Tuple[str, object, str]]:
    """How each worker that ended was seen to end, by mechanism: ``pid -> ("exit", code,
    source)`` or ``("signal", words, source)``. From PyTorch's SIGCHLD handler
    (torch/csrc/DataLoader.cpp: "exited unexpectedly with exit code N" for ``CLD_EXITED``,
    "is killed by signal: X" for ``CLD_KILLED``/``CLD_DUMPED``), and from the inside view's
    record of each worker's ``Popen.returncode`` (negative: the signal's number; CPython's
    multiprocessing.popen_fork). A signal named anywhere wins over an exit code."""
    ends: Dict[int, Tuple[str, object, str]] = {}
    for v in facts.inside.loaders if facts.inside else ():
        for pid, code in zip(v.workers, v.worker_exitcodes):
            if code is None:
                continue
            if code < 0:
                ends[pid] = ("signal", _signal_words(-code), f"the inside view: returncode {code}")
            else:
                ends[pid] = ("exit", code, f"the inside view: exit code {code}")
    for m in _EXIT_CODE.finditer(facts.stderr_tail or ""):
        pid = int(m.group(1))
        if ends.get(pid, ("exit",))[0] != "signal":
            ends[pid] = ("exit", int(m.group(2)), f"stderr: {m.group(0)}")
    for m in _KILLED.finditer(facts.stderr_tail or ""):
        if m.group(2):
            for pid in map(int, re.findall(r"\d+", m.group(1))):
                ends[pid] = ("signal", m.group(2), f"stderr: {m.group(0)}")
    return ends


def _died_pids(facts: Facts) -> Tuple[int, ...]:
    """The pids PyTorch's last "DataLoader worker (pid N) …" error in main names (the
    "killed by signal" one when there is one), in order."""
    matches = list(_KILLED.finditer(facts.stderr_tail or ""))
    m = next((x for x in reversed(matches) if x.group(2)), matches[-1] if matches else None)
    return tuple(int(p) for p in re.findall(r"\d+", m.group(1))) if m else ()


def worker_last_words(stderr: str, count: int = 3) -> List[str]:
    """The last ``count`` lines on stderr that are a worker's own (the exception line of a
    traceback a worker process printed as it ended, and lines no traceback holds, such as
    ``sys.exit("message")``'s message), in order, without main's tracebacks
    (:func:`~watchdog.diagnose.common.stderr_traceback_blocks`)."""
    blocks, loose = stderr_traceback_blocks(stderr)
    words = [b.exception for b in blocks if b.worker and b.exception] + [
        line for line in loose if not line.startswith(("Process ", "[W ", "Warning:"))
    ]
    return list(dict.fromkeys(words))[-count:]


def _worker_block(stderr: str) -> Optional[TracebackBlock]:
    """The last traceback a worker process printed as it ended, or ``None``."""
    blocks, _ = stderr_traceback_blocks(stderr)
    return next((b for b in reversed(blocks) if b.worker and b.exception), None)


def _limits_text(facts: Facts, names: Sequence[str]) -> List[str]:
    """``pids.max of cgroup /x = 40`` for each of ``facts.task_limits`` whose name starts with
    one of ``names`` (``unlimited`` for ``None``)."""
    return [
        f"{name} = {'unlimited' if value is None else value}"
        for name, value in facts.task_limits
        if name.startswith(tuple(names))
    ]


@rule("worker_exited", SEVERITY_CRASH, 5, CRASH)
def worker_exited(facts: Facts) -> Optional[Finding]:
    """A worker ended by exiting, with a code (0 or N) and no signal (:func:`worker_ends`):
    nothing killed it, so no memory or OOM advice applies. What it printed last decides the
    cause: a limit on threads or processes (EAGAIN: the pids cgroup, ``RLIMIT_NPROC``), an
    exception it did not catch outside the fetch PyTorch wraps, ``sys.exit("message")``
    (multiprocessing prints the message and exits with 1), or a silent ``os._exit``."""
    if not facts.stderr_tail:
        return None
    phrased = _KILLED.search(facts.stderr_tail) or _EXIT_CODE.search(facts.stderr_tail)
    lost = _LOST_RECEIVE.search(facts.stderr_tail)
    if not (phrased or lost) or _NATIVE_SIGNAL.search(facts.stderr_tail):
        return None
    ends = worker_ends(facts)
    if not phrased and not any(end[2].startswith("the inside view") for end in ends.values()):
        return None  # a lost receive alone, with no worker's recorded end, names no worker
    named = _died_pids(facts)
    if any(ends.get(pid, ("",))[0] == "signal" for pid in named):
        return None
    exited = [(pid, ends[pid]) for pid in (named or tuple(ends)) if ends.get(pid, ("",))[0] == "exit"]
    if not exited:
        return None
    codes = sorted({int(end[1]) for _, end in exited})  # type: ignore[call-overload]
    pids = tuple(pid for pid, _ in exited)
    evidence = [f"worker pid {pid}: exited with code {end[1]}, no signal ({end[2]})" for pid, end in exited[:4]]
    words = worker_last_words(facts.stderr_tail)
    evidence += [f"stderr, the worker's last words: {w}" for w in words]
    if lost and not phrased:
        evidence.append(
            f"main: taking a batch's shared tensor from its worker failed ({lost.group(0).splitlines()[-1]} in "
            "rebuild_storage_fd): the worker that sent it had already ended"
        )
    block = _worker_block(facts.stderr_tail)
    user = block.user() if block is not None else None
    code_text = ", ".join(map(str, codes))
    who = f"DataLoader worker(s) {', '.join(map(str, pids))}"
    eagain = next((w for w in words if _EAGAIN.search(w)), None)
    unpickle = next((w for w in words if _UNPICKLE.search(w)), None)
    if eagain is not None:
        limits = _limits_text(facts, ("pids.max", "RLIMIT_NPROC"))
        evidence += [f"limit on the job's tasks: {x}" for x in limits]
        how = f"exited with code {code_text} because a new thread or process could not be created (EAGAIN)"
        remedy = (
            f"`{eagain}`: pthread_create or fork failed with EAGAIN, the limit on tasks (every process and thread "
            "counts) was reached: "
            + ("; ".join(limits) if limits else "the pids cgroup's pids.max or RLIMIT_NPROC")
            + ". Raise it (docker run --pids-limit, Kubernetes podPidsLimit, systemd TasksMax, `ulimit -u` for "
            "RLIMIT_NPROC), or need fewer tasks: lower num_workers, and the threads each worker starts "
            "(OMP_NUM_THREADS, thread pools the Dataset creates); each worker also starts a queue feeder thread."
        )
    elif unpickle is not None:
        u = _UNPICKLE.search(unpickle)
        assert u is not None
        how = (
            f"exited with code {code_text}: it could not unpickle {u.group('attr')} (not found in {u.group('module')})"
        )
        remedy = _unpickle_remedy(u.group("attr"), u.group("module"))
    elif block is not None:
        where = f" at {frames.short_path(user.file)}:{user.line}" if user else ""
        how = f"exited with code {code_text} after an uncaught {block.exception}{where}"
        remedy = (
            f"The worker process died of `{block.exception}`, raised outside the fetch PyTorch wraps (the worker "
            "loop, its queue, a thread it started): main only learns that it exited. Fix what raised it at the "
            "place above; num_workers=0 reproduces it in main."
        )
    elif codes == [0]:
        how = "exited with code 0 before the loader was done: no signal, no exception"
        remedy = (
            "Something in the worker ended its process on purpose with code 0: os._exit(0), sys.exit(0) or exit() "
            "in the Dataset, collate_fn or worker_init_fn, or a native library calling exit(0) (multiprocessing "
            "runs none of them for a worker that just returns). Nothing killed it: memory is not the cause. Find "
            "the exit call (grep the Dataset's code and its libraries for os._exit, sys.exit, exit(); run with "
            "num_workers=0, where it ends main the same way)."
        )
    else:
        said = f" It printed `{words[-1]}` as it ended." if words else " It printed nothing."
        how = f"exited with code {code_text} (no signal: it was not killed)"
        remedy = (
            f'The worker ended its own process with exit code {code_text}: sys.exit("…") (multiprocessing prints '
            "the message and exits with 1), exit(N), or a native library's exit().{said} A SystemExit is no "
            "Exception, so PyTorch does not pass it to main as a traceback: raise an exception for a bad sample "
            "(or skip it) instead of exiting, and num_workers=0 shows where it exits."
        ).replace("{said}", said)
    if words and eagain is None and unpickle is None and block is None:
        how += f"; its last words: `{words[-1][:120]}`"
    seen_at = None if user is not None else next((a for p in pids for a in [last_seen_at(facts, p)] if a), None)
    if seen_at is not None:
        evidence.append(seen_at.evidence("worker"))
    fetch_code = _dataset_code(facts, pids) if user is None and seen_at is None else None
    evidence.append(f"nothing signalled the worker: no OOM advice applies{_exit(facts)}")
    return Finding(
        confidence=0.9,
        summary=f"{who} {how}; the main process stopped with an error.",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=pids,
        location=(f"{user.file}:{user.line}" if user is not None else None)
        or (f"{seen_at.frame.file}:{seen_at.frame.line}" if seen_at is not None else None)
        or (f"{fetch_code.file}:{fetch_code.line}" if fetch_code is not None else None)
        or _loader_site(facts)
        or traceback_location(facts.stderr_tail),
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_MULTIPROCESSING),
    )


def _unpickle_remedy(attr: str, module: str) -> str:
    """The remedy for a spawned worker that cannot find ``attr`` in ``module``."""
    named = "" if module in ("__main__", "__mp_main__") else f" ({module} under python -m)"
    return (
        f"A spawned worker re-imports the main script as __mp_main__{named} without "
        f'running its `if __name__ == "__main__":` block, then unpickles the Dataset: {attr} must be an attribute of '
        "that module. Define it at the module's top level, above the guard (not inside the guard, a function or a "
        "notebook cell), or in a module of its own that the script imports."
    )


@rule("worker_killed", SEVERITY_CRASH, 5, CRASH)
def worker_killed(facts: Facts) -> Optional[Finding]:
    """A worker vanished or was killed by a signal; PyTorch raises "DataLoader worker (pid N) is
    killed by signal" (SIGCHLD handler) or "exited unexpectedly" (``_try_get_data``). The
    worker's own C handler prints "Unexpected segmentation fault encountered in worker" first;
    when main's message loses the race, that line alone names the signal."""
    if not facts.stderr_tail:
        return None
    matches = list(_KILLED.finditer(facts.stderr_tail))
    native = _NATIVE_SIGNAL.search(facts.stderr_tail)
    if not matches and native is None:
        return None
    m = next(
        (x for x in reversed(matches) if x.group(2)), matches[-1] if matches else None
    )  # "killed by signal" says more
    pids = tuple(int(p) for p in re.findall(r"\d+", m.group(1))) if m else ()
    ends = worker_ends(facts)
    if native is None and pids and all(ends.get(pid, ("",))[0] == "exit" for pid in pids):
        return None  # they exited with a code: worker_exited
    recorded = next((str(ends[pid][1]) for pid in pids if ends.get(pid, ("",))[0] == "signal"), None)
    signal_name = (m.group(2) if m else None) or (native.group(1).capitalize() if native else None) or recorded
    evidence = [f"stderr: {m.group(0)}"] if m else []
    evidence += [f"worker pid {pid}: {ends[pid][2]}" for pid in pids if pid in ends and ends[pid][2].startswith("the")]
    if native is not None:
        evidence.append(f"stderr: {native.group(0)} (the worker's own signal handler, torch/csrc/DataLoader.cpp)")
    for pid in pids:
        last = facts.last_seen(pid)
        if last is not None:
            evidence.append(
                f"worker pid {pid}: last seen state {last.state}, RSS {mib(last.rss_bytes)}, USS {mib(last.uss_bytes)}"
                + memory_age(facts, pid)
            )
    oom = bool(facts.oom_kills)
    limit = max_over_timeline(facts, lambda s: s.host.mem_limit_bytes)
    used = max_over_timeline(facts, lambda s: s.host.mem_cgroup_usage_bytes)
    if oom:
        evidence.append(
            f"the job's memory cgroup counted {facts.oom_kills} OOM kill(s) while it was watched: the kernel's OOM "
            "killer ended the worker"
            + (f" at the cgroup's limit of {mib(limit)} (highest usage seen {mib(used)})" if limit else "")
        )
    elif limit:
        evidence.append(f"the job's memory cgroup: limit {mib(limit)}, highest usage seen {mib(used)}")
    avail = max_over_timeline(facts, lambda s: -s.host.mem_left_bytes)
    if avail is not None:
        evidence.append(f"lowest memory left to the job seen: {mib(-avail)}{_exit(facts)}")
    how = f"killed by signal {signal_name}" if signal_name else "ended (PyTorch recorded no exit code or signal)"
    if oom:
        how += " by the OOM killer"
    seen = any(facts.last_seen(pid) is not None for pid in pids)
    if pids and not seen:
        evidence.append(
            "the watchdog has no sample of these workers: they lived less than about one sampling interval "
            "(interval_s) from their start to their death, or between two samples"
        )
    low_memory = avail is not None and -avail < 0.05 * 2**30
    segfault = (signal_name or "").lower().startswith(("segmentation", "floating"))
    bus = (signal_name or "").lower().startswith("bus")
    truncated = truncated_mappings(facts, pids or None) if bus else []
    for pid, path, extent, size in truncated[:3]:
        evidence.append(
            f"worker pid {pid} had {path} mapped up to byte {extent}; the same file is now {size} bytes: it shrank "
            "under the mapping"
        )
    if truncated:
        pid, path, extent, size = truncated[0]
        how += f": {path}, which it had mapped, shrank under the mapping"
        remedy = (
            f"Another process rewrote or truncated {path} while workers had it mapped (np.memmap, "
            "np.load(mmap_mode=...)): a page past the file's new end raises SIGBUS. Write a new version to a new file "
            "and os.replace() it into place (the workers keep the old one until they reopen it), never truncate or "
            "rewrite a file in place while it is mapped; reopen the mapping in each worker after a rewrite."
        )
    elif (signal_name or "").lower().startswith(("abort", "terminated")):
        asserted = [line.strip() for line in facts.stderr_tail.splitlines() if _ASSERTION.search(line)]
        evidence += [f"stderr: {line}" for line in asserted[-2:]]
        if (signal_name or "").lower().startswith("abort"):
            remedy = (
                "A native library in the worker called abort(): "
                + (f"it said `{asserted[-1]}`; " if asserted else "a failed assertion or an uncaught C++ exception; ")
                + "reproduce with num_workers=0 under `python -X faulthandler` to get the stack, and check the "
                "library's version and the record it was given."
            )
        else:
            remedy = (
                "SIGTERM came from a process outside the job (the OOM killer never sends it): a scheduler ending "
                "the job, `kill`, or a cleanup script that matched the worker's name; check who, and handle or "
                "avoid it."
            )
    elif bus:
        shm_total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
        shm_peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
        mapped = (
            "a file-backed mapping (np.memmap, np.load(mmap_mode=...), safetensors, Arrow) whose file shrank or "
            "whose disk filled: check which files the worker maps and whether something rewrites them in place "
            "while the job runs (write a new file and os.replace() it instead)"
        )
        shm = "/dev/shm full (Docker's default is 64 MB: --shm-size) or a shared-memory file removed"
        if shm_total and shm_peak is not None and shm_peak < 0.05 * shm_total:
            remedy = (
                f"A bus error is a mapping that lost its backing store. /dev/shm was at most {mib(shm_peak)} of "
                f"{mib(shm_total)} used, so most likely {mapped}; less likely {shm}."
            )
        else:
            remedy = f"A bus error is a mapping that lost its backing store: {shm}, or {mapped}."
    elif segfault:
        remedy = (
            "A native library called from __getitem__ crashed (a decoder, a C extension, ctypes): this is a bug or "
            "bad input, not memory. Reproduce with num_workers=0 under `python -X faulthandler` (or gdb) to get the "
            "native stack, check the record being decoded, and upgrade or replace the library."
        )
    elif oom or (signal_name == "Killed" and low_memory):
        kept = kept_persistent_loaders(facts)
        step = None if kept else next((s for s in (memory_step(facts, p, limit) for p in pids) if s), None)
        if kept is not None:
            evidence += live_iterator_evidence(facts)
            how += f": {kept[0]} loaders' persistent workers ({kept[1]}) were alive at once"
            where = f"the cgroup's {mib(limit)} limit" if limit else "the memory limit"
            remedy = (
                kept_loaders_text(kept) + f". Each worker holds its own memory: that, not the Dataset's objects, "
                f"reached {where}. Check `dmesg | grep -i -e oom -e killed`."
            )
        elif step is not None:
            pid = next(p for p in pids if memory_step(facts, p, limit) is not None)
            batch = _worker_batch(facts, pid)
            evidence.append(_step_evidence(facts, pid, step, limit) + (f"; the worker was on {batch}" if batch else ""))
            how += f": one sample asked for {'at least ' if step.seen else 'more than '}{mib(step.asked)} at once"
            remedy = (
                f"One sample asked for {'more than ' if not step.seen else 'at least '}{mib(step.asked)} at once"
                + (f" ({batch})" if batch else "")
                + ": a step, not a slope; the worker's memory stood still before it, so no cache grew. Find that "
                "sample and check the size it declares before allocating (a length, shape or count read from its "
                "header or file: reject or cap it, a corrupt header asks for gigabytes); raise "
                + (f"the cgroup's {mib(limit)} limit" if limit else "the memory limit")
                + " only if samples that large are real. Check `dmesg | grep -i -e oom -e killed`."
            )
        else:
            remedy = _memory_remedy(facts, pids, limit)
    elif (signal_name or "").lower().startswith("illegal"):
        remedy = (
            "SIGILL: the worker ran a machine instruction this CPU does not have: a binary built for another CPU "
            "(a wheel or extension compiled with -march=native, AVX-512 or AVX2 on an older or virtual CPU, an ARM "
            "build feature). Reinstall the library the worker calls from a build for this CPU (pip install "
            "--no-binary, or the generic wheel), or run where the CPU matches; `grep flags /proc/cpuinfo` lists what "
            "it has."
        )
    elif (signal_name or "").lower().startswith("cpu time"):
        limits = _limits_text(facts, ("RLIMIT_CPU",))
        evidence += [f"limit on the job's processes: {x} (seconds)" for x in limits]
        remedy = (
            "SIGXCPU: the worker used up its CPU-time limit (RLIMIT_CPU"
            + (f": {', '.join(limits)} s" if limits else "")
            + "), set by `ulimit -t`, a scheduler or a container's limits, and inherited by every worker. Raise or "
            "remove it (ulimit -t unlimited, the scheduler's CPU-time option); long-lived persistent_workers "
            "accumulate CPU time over epochs."
        )
    elif signal_name == "Killed":
        remedy = (
            "SIGKILL with no OOM kill counted in the job's memory cgroup: check `dmesg | grep -i -e oom -e killed` "
            "(the host's OOM killer outside this cgroup), then who else sends SIGKILL (a scheduler's memory or time "
            "limit, an operator, a watchdog script)."
        )
    elif signal_name:
        remedy = (
            f"The worker died of the signal {signal_name}: find who sends it (`kill`, a scheduler, a library's own "
            "handler) or what raises it in the worker; reproduce with num_workers=0 under `python -X faulthandler`."
        )
    else:
        remedy = (
            "PyTorch did not record how the worker ended (no exit code, no signal). Look at the worker's last lines "
            "on stderr, and at `dmesg | grep -i -e oom -e killed` for a kill."
        )
    who = f"DataLoader worker(s) {', '.join(map(str, pids))}" if pids else "A DataLoader worker"
    loop = _loader_site(facts)
    dump = fatal_error_dump(facts.stderr_tail)
    hit = dump.user() if dump is not None else None
    if dump is not None and hit is not None:
        inner = " ← ".join(f"{f.function} ({frames.short_path(f.file)}:{f.line})" for f in dump.frames[:3])
        evidence.append(
            f"stderr (faulthandler, which dlwatch's inside view turns on in workers): the {dump.what.lower()} hit "
            f"in {hit.function} at {hit.file}:{hit.line}; innermost frames: {inner}"
        )
        how += f" (in {hit.function} at {frames.short_path(hit.file)}:{hit.line})"
    seen_at = None if hit is not None else next((a for p in pids for a in [last_seen_at(facts, p)] if a), None)
    if seen_at is not None:
        evidence.append(seen_at.evidence("worker"))
        how += (
            f" (at its last stack, {seconds(seen_at.before_s)} before: in {seen_at.frame.function} at "
            f"{frames.short_path(seen_at.frame.file)}:{seen_at.frame.line})"
        )
    fetch_code = _dataset_code(facts, pids) if hit is None and seen_at is None and signal_name else None
    if fetch_code is not None:
        evidence.append(
            f"no stack of the worker exists (it died with no traceback, and none was taken while it ran): its fetches "
            f"run {fetch_code.function}, defined at {fetch_code.file}:{fetch_code.line} (the inside view)"
        )
    return Finding(
        confidence=(0.9 if oom or signal_name else 0.75) - (0 if seen or not pids else 0.15),
        summary=f"{who} {how}; the main process stopped with an error.",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=pids,
        location=(f"{hit.file}:{hit.line}" if hit is not None else None)
        or (f"{seen_at.frame.file}:{seen_at.frame.line}" if seen_at is not None else None)
        or (f"{fetch_code.file}:{fetch_code.line}" if fetch_code is not None else None)
        or loop
        or traceback_location(facts.stderr_tail),
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_MULTIPROCESSING),
    )


def _dataset_code(facts: Facts, pids: Tuple[int, ...]) -> Optional[Frame]:
    """Where the Dataset's ``__getitem__`` (``__iter__``) of the loader whose worker ``pids``
    were is defined, from the inside view, when it is the job's code (not torch's, not the
    standard library's); else ``None``."""
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if v.dataset_code is not None]
    view = next((v for v in reversed(views) if set(pids) & set(v.workers)), views[-1] if views else None)
    code = view.dataset_code if view is not None else None
    return code if code is not None and frames.is_user(code) else None


def _loader_site(facts: Facts) -> Optional[str]:
    """``file:line`` where main iterates the DataLoader whose worker died (the inside view's
    record of the iterator), or ``None``: for a signal death there is no worker traceback, and
    the line main happened to run when SIGCHLD came is no place to change."""
    main = facts.sample.main
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if main is None or v.pid == main.pid]
    site = views[-1].site if views else None
    return f"{site.file}:{site.line}" if site is not None else None


@rule("worker_start_failed", SEVERITY_CRASH, 3, CRASH)
def worker_start_failed(facts: Facts) -> Optional[Finding]:
    """Workers could not start: under spawn/forkserver the Dataset, ``collate_fn`` or
    ``worker_init_fn`` cannot be pickled, ``__main__`` is re-imported without a main guard, or
    the loader runs in a daemonic process (CPython's multiprocessing programming guidelines)."""
    if not facts.stderr_tail:
        return None
    lines = [x for x in stderr_lines(facts, _START) if not _PICKLE.search(x) or _START_PATH.search(facts.stderr_tail)]
    blocks, _ = stderr_traceback_blocks(facts.stderr_tail)
    lines += [  # a spawned worker's own traceback: pickle.load in multiprocessing/spawn.py
        b.exception
        for b in blocks
        if b.worker
        and b.exception
        and _UNPICKLE.search(b.exception)
        and b.exception not in lines
        and any(frames.normalise_path(f.file).endswith("multiprocessing/spawn.py") for f, _ in b.frames)
    ]
    if not lines:
        return None
    line = lines[-1]
    unpickle = _UNPICKLE.search(line)
    if unpickle is not None:
        remedy = _unpickle_remedy(unpickle.group("attr"), unpickle.group("module"))
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
        + _exit(facts)
    )
    return Finding(
        confidence=0.9,
        summary=f"DataLoader workers could not start: {line[:160]}",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=(facts.sample.main.pid,) if facts.sample.main else (),
        location=traceback_location(facts.stderr_tail),
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_START_METHODS),
    )


@rule("cuda_in_forked_worker", SEVERITY_CRASH, 4, CRASH_AND_HANG)
def cuda_in_forked_worker(facts: Facts) -> Optional[Finding]:
    """CUDA was initialised in the parent and touched again in a forked worker (PyTorch's notes on
    CUDA in multiprocessing)."""
    lines = stderr_lines(facts, _CUDA_FORK)
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
        location=traceback_location(facts.stderr_tail),
        docs=(DOC_CUDA_FORK, DOC_START_METHODS),
        fix=SPAWN,
    )


def _timeout_fired_at(facts: Facts, timeout_s: float) -> Optional[float]:
    """When main's ``DataLoader(timeout=…)`` fired (``time.monotonic()``, the clock of the
    timeline too): ``timeout_s`` after main last entered ``__next__`` without a batch (the
    inside view's ``waiting_since`` of main's latest iterator), or ``None`` unknown."""
    main = facts.sample.main
    views = [
        v
        for v in (facts.inside.loaders if facts.inside else ())
        if (main is None or v.pid == main.pid) and v.waiting_since is not None
    ]
    return views[-1].waiting_since + timeout_s if views and views[-1].waiting_since is not None else None


def _workers_cpu_s(facts: Facts, window_s: float, end: Optional[float] = None) -> Tuple[Optional[float], int]:
    """CPU seconds all workers used in the ``window_s`` before ``end`` (the timeline's last
    sample when ``None``), and how many workers were seen then."""
    if not facts.timeline:
        return None, 0
    if end is None:
        end = facts.timeline[-1].t_mono
    recent = [s for s in facts.timeline if end - window_s <= s.t_mono <= end + 1.0]
    if len(recent) < 2:
        return None, 0
    total, pids = 0.0, set()
    first: Dict[ProcId, float] = {}  # CPU seconds at the window's start
    for s in recent:
        for w in s.workers:
            first.setdefault(w.ident, w.cpu_s)
            pids.add(w.pid)
    last = {}
    for s in recent:
        for w in s.workers:
            last[w.ident] = w.cpu_s
    total = sum(last[k] - first[k] for k in last)
    return total, len(pids)


def _workers_runq_s(facts: Facts, window_s: float, end: Optional[float] = None) -> float:
    """Seconds the workers' main threads waited runnable for a CPU in the same window as
    :func:`_workers_cpu_s` (``ProcessSample.runq_wait_s``, ``/proc/PID/schedstat``; a worker
    not read at both ends counts 0): on a loaded machine a computing worker gets little CPU,
    but it is runnable all along (issue #34)."""
    if end is None:
        end = facts.timeline[-1].t_mono if facts.timeline else 0.0
    first: Dict[ProcId, float] = {}
    last: Dict[ProcId, float] = {}
    for s in facts.timeline:
        if end - window_s <= s.t_mono <= end + 1.0:
            for w in s.workers:
                if w.runq_wait_s is not None:
                    first.setdefault(w.ident, w.runq_wait_s)
                    last[w.ident] = w.runq_wait_s
    return sum(last[k] - first[k] for k in last)


# The timeout ``dlwatch verify`` tries for a loader_timeout of busy workers: this many times the
# one that fired, and at least TIMEOUT_FIX_MIN_S seconds.
TIMEOUT_FIX_FACTOR, TIMEOUT_FIX_MIN_S = 4.0, 60.0


@rule("loader_timeout", SEVERITY_CRASH, 6, CRASH)
def loader_timeout(facts: Facts) -> Optional[Finding]:
    """``DataLoader(timeout=N)`` expired: main raised "DataLoader timed out after N seconds"
    (``_try_get_data`` in dataloader.py). Busy workers mean the timeout is shorter than a batch
    takes; quiet workers mean one was stuck and the timeout did its job."""
    m = _TIMED_OUT.search(facts.stderr_tail or "")
    if m is None:
        return None
    timeout_s = float(m.group(1))
    fired = _timeout_fired_at(facts, timeout_s)
    cpu, workers = _workers_cpu_s(facts, timeout_s, fired)
    if cpu is None and fired is not None:
        cpu, workers = _workers_cpu_s(facts, timeout_s)
        fired = None
    evidence = [f"stderr: {m.group(0)}"]
    waited = _workers_runq_s(facts, timeout_s, fired) if cpu is not None else 0.0
    busy = cpu is not None and workers and cpu + waited >= 0.25 * timeout_s
    fix = Fix(loader=(("timeout", max(TIMEOUT_FIX_MIN_S, TIMEOUT_FIX_FACTOR * timeout_s)),)) if busy else None
    if cpu is not None:
        evidence.append(
            f"the {workers} worker(s) used {cpu:.1f} s of CPU"
            + (f" and waited {waited:.1f} s runnable for one (a loaded machine)" if waited >= 0.05 * timeout_s else "")
            + f" in the {timeout_s:g} s before the timeout fired"
            + (
                " (main waited for that batch from then on: the inside view)"
                if fired is not None
                else " (taken as the last of the timeline: when main began to wait is not known)"
            )
            + _exit(facts)
        )
    if busy:
        summary = (
            f"DataLoader(timeout={timeout_s:g}) fired while the workers were busy computing a batch: the timeout is "
            "shorter than a batch takes."
        )
        remedy = (
            f"Raise DataLoader(timeout=…) above the slowest batch (more than {timeout_s:g} s here, with margin for "
            "load), or make batches cheaper (smaller batch_size, lighter transforms, more workers if CPUs allow). "
            "Nothing was deadlocked."
        )
    else:
        summary = (
            f"DataLoader(timeout={timeout_s:g}) fired while the workers did no work: a worker was stuck, and the "
            "timeout turned the hang into this error."
        )
        remedy = (
            "The timeout did its job: find what the worker waited on (a storage or network call without a timeout, a "
            "lock); run under `dlwatch run` with stall_timeout_s below the DataLoader timeout to get the worker's "
            "stack before it fires."
        )
    return Finding(
        confidence=0.85 if cpu is not None else 0.7,
        summary=summary,
        evidence=tuple(evidence),
        remedy=remedy,
        pids=tuple(w.pid for w in facts.sample.workers),
        location=traceback_location(facts.stderr_tail),
        docs=(DOC_DATALOADER,),
        fix=fix,
    )


_STAGE_REMEDY = {  # the collate stage's is _collate_remedy
    STAGE_DATASET: (
        "Fix the Dataset code at the location above; the loader itself is fine. Reproduce in one process with "
        "num_workers=0 (or dataset[i] for the failing index) to debug it in place."
    ),
    STAGE_WORKER_INIT: (
        "worker_init_fn raised before the worker fetched anything; with num_workers=0 it never runs, so call it "
        "directly to reproduce: worker_init_fn(0) in one process (torch.utils.data.get_worker_info() is None "
        "there). Check what it reads from its surroundings (environment variables, files, the dataset's state)."
    ),
}


def _collate_remedy(samples: str) -> str:
    """The collate stage's remedy, reproducing with ``samples`` (the failing batch's, or a
    first batch's: ``range(batch_size)``)."""
    return (
        "The samples are fine one by one; putting them into a batch failed. Reproduce in one process with "
        f"collate_fn([dataset[i] for i in {samples}]) (torch.utils.data.default_collate when you pass none) and "
        "look at each field's type: default_collate stacks tensors, numpy arrays of numbers, numbers, strings, and "
        "dicts, lists and tuples of those; an object array (a pandas object column), None or a custom class fails. "
        "Convert that field in __getitem__, or pass a collate_fn that handles it."
    )


def _raised_failure(facts: Facts, worker_id: Optional[int]) -> Optional[WorkerFailure]:
    """The batch whose exception main re-raised, as the worker with ``worker_id`` recorded it
    (:class:`~watchdog.types.WorkerFailure`): main re-raises in batch order, and a worker fetches
    its batches in order, so the first of that worker's latest run of failures (another worker
    process, or a lower batch index than the one before, starts a new iterator's run)."""
    mine = sorted(
        (f for f in (facts.inside.failures if facts.inside else ()) if worker_id is None or f.worker == worker_id),
        key=lambda f: f.at_mono,
    )
    first = None
    for i, f in enumerate(mine):
        if i == 0 or f.pid != mine[i - 1].pid or f.batch < mine[i - 1].batch:
            first = f
    return first


def _as_python(indices: Optional[Tuple[int, ...]]) -> Optional[str]:
    """Sample indices as a Python expression: ``range(a, b)`` when they run consecutively."""
    if not indices:
        return None
    if list(indices) == list(range(indices[0], indices[0] + len(indices))):
        return f"range({indices[0]}, {indices[0] + len(indices)})"
    return repr(list(indices))


def _failing_batch(facts: Facts, worker_id: Optional[int]) -> Optional[Tuple[str, Optional[str], Optional[int]]]:
    """Which batch failed: ``(words, its indices as a Python expression or None, the sample
    index that raised or None)``: from the worker's own record when there is one
    (:func:`_raised_failure`), else from the batch index main waited for, whose samples a
    ``SequentialSampler`` (no shuffling) gives; ``None`` without an inside view."""
    failed = _raised_failure(facts, worker_id)
    if failed is not None:
        shown = list(failed.indices[:16]) if failed.indices else None
        words = f"batch {failed.batch}" + (
            f", samples {shown}{' …' if failed.indices and len(failed.indices) > 16 else ''}" if shown else ""
        )
        if failed.sample is not None and failed.through:
            words += (
                f"; the sample that raised: index {failed.sample} of the dataset that {failed.through} reads "
                "(not of the Dataset the DataLoader was given)"
            )
        elif failed.sample is not None:
            words += f"; the sample that raised: index {failed.sample}"
        words += f" (recorded by worker pid {failed.pid})"
        return words, _as_python(failed.indices), (failed.sample if not failed.through else None)
    main = facts.sample.main
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if main is None or v.pid == main.pid]
    if not views:
        return None
    v = views[-1]
    settings = dict(v.settings)
    size = settings.get("batch_size")
    if settings.get("sampler") == "SequentialSampler" and isinstance(size, int) and size > 0:
        first = v.waiting_idx * size
        return f"batch {v.waiting_idx}, samples {first}–{first + size - 1}", f"range({first}, {first + size})", None
    return (
        f"batch {v.waiting_idx} (the sampler shuffles: log the indices in collate_fn to find its samples)",
        None,
        None,
    )


# Exceptions of a lookup that a Dataset changed in main (a longer list, new keys) raises in a
# worker whose copy is older.
_LOOKUP_ERRORS = ("IndexError", "KeyError")


def _stale_persistent_copy(
    facts: Facts, worker_id: Optional[int], exc_class: str, sample: Optional[int]
) -> Optional[Tuple[str, List[str], str]]:
    """``(summary tail, evidence, remedy)`` when a lookup error (IndexError, KeyError) in a
    worker came in a later epoch of an iterator with ``persistent_workers=True``: those workers
    hold the Dataset as it was when they started (a fork copy, or a pickled one under
    spawn/forkserver; torch/utils/data/dataloader.py keeps them across epochs and only resets
    the sampler, which main runs on its own copy), and an epoch reads every index its sampler
    gives, so the earlier epochs read theirs without this error: main changed the Dataset
    since. The index is said to be past what an earlier epoch read when the counts show it
    (its batches × batch_size). ``None`` otherwise."""
    if not exc_class.endswith(_LOOKUP_ERRORS):
        return None
    failed = _raised_failure(facts, worker_id)
    main = facts.sample.main
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if main is None or v.pid == main.pid]
    view = next((v for v in reversed(views) if failed is not None and failed.pid in v.workers), None)
    view = view or (views[-1] if views and failed is None else None)
    if view is None or view.setting("persistent_workers") is not True or view.epoch < 1:
        return None
    evidence = [
        f"the inside view: the iterator of {view.label} has persistent_workers=True and was in epoch {view.epoch} "
        f"(counted from 0) when it failed: its workers {', '.join(map(str, view.workers))} started before epoch 0 "
        "and hold the Dataset as it was then"
    ]
    size = view.setting("batch_size")
    past = ""
    if failed is not None and isinstance(size, int) and size > 0 and view.batches >= failed.batch:
        earlier = (view.batches - failed.batch) // view.epoch  # batches each earlier epoch delivered
        evidence.append(
            f"each earlier epoch delivered {earlier} batch(es) of at most {size} samples without this error: an epoch "
            "reads every index its sampler gives"
        )
        if sample is not None and earlier and sample >= earlier * size:
            past = f"; index {sample} is past the {earlier * size} samples an earlier epoch read at most"
            evidence[-1] += past
    what = f"dataset[{sample}]" if sample is not None else "the failing index"
    remedy = (
        "The persistent workers hold a stale copy of the Dataset: the one they got when they started (a fork copy; "
        "a pickled one under spawn/forkserver). What main changed since (its length, its list or dict of samples) "
        "does not reach them, while main's sampler already draws indices from the new len"
        + (" (" + past[2:] + ")" if past else "")
        + f". So {what} works in main and fails only in the workers. Recreate the DataLoader after changing the "
        "dataset (a new DataLoader starts new workers with the new copy), or use persistent_workers=False (each "
        "epoch's workers copy it anew); data that must change under running workers belongs in a file or shared "
        "tensor that they read."
    )
    tail = (
        f" in epoch {view.epoch}: the persistent workers hold a stale copy of the Dataset (as it was when they "
        "started), and main's copy has changed since"
    )
    return tail, evidence, remedy


def _worker_exception(facts: Facts, wanted: str) -> Optional[Finding]:
    """An exception raised inside a worker at stage ``wanted`` (:meth:`OriginalTraceback.stage`),
    which PyTorch re-raises in main as "Caught X in DataLoader worker process N" with the
    worker's "Original Traceback" (``ExceptionWrapper`` in torch/_utils.py); the stage picks
    the summary and the way to reproduce it."""
    caught = list(_CAUGHT.finditer(facts.stderr_tail or ""))
    if not caught:
        return None
    m = caught[-1]
    tb = original_traceback(facts.stderr_tail)
    exc = tb.exception if tb else None
    if exc and is_loader_resource_error(exc):
        return None
    stage = tb.stage() if tb else STAGE_DATASET
    if stage != wanted:
        return None
    found = tb.user() if tb else None
    user, source = found if found else (None, "")
    where = f"{frames.short_path(user.file)}:{user.line} in {user.function}" if user else ""
    evidence = [f"stderr: {m.group(0)}"]
    if exc:
        evidence.append(f"stderr (Original Traceback): {exc}")
    if user is not None:
        evidence.append(f"raised at {where}" + (f": `{source}`" if source else ""))
    if stage != STAGE_DATASET:
        evidence.append(f"the worker's traceback runs through PyTorch's call of {stage}, not the Dataset's methods")
    worker_id = int(m.group(2))
    batch = _failing_batch(facts, worker_id) if stage != STAGE_WORKER_INIT else None
    sample = batch[2] if batch else None
    if batch:
        evidence.append(f"the failing batch (the inside view): {batch[0]}")
    evidence.append(f"worker id {m.group(2)} raised it; main re-raised it and stopped{_exit(facts)}")
    hint = ""
    stale = _stale_persistent_copy(facts, worker_id, m.group(1), sample) if stage == STAGE_DATASET else None
    if stale is not None:
        evidence += stale[1]
    elif stage == STAGE_DATASET and m.group(1).endswith("IndexError"):
        hint = " An IndexError in __getitem__ often means __len__ reports more samples than the Dataset can serve."
    if stale is not None:
        remedy = stale[2]
    elif stage == STAGE_COLLATE:
        remedy = _collate_remedy(batch[1] if batch and batch[1] else "range(batch_size)")
    elif stage == STAGE_DATASET and sample is not None:
        remedy = (
            f"Fix the Dataset code at the location above; the loader itself is fine. Reproduce in one process: "
            f"dataset[{sample}] (the sample that raised), or num_workers=0 to debug it in place."
        )
    else:
        remedy = _STAGE_REMEDY[stage]
    who = "The Dataset" if stage == STAGE_DATASET else stage
    return Finding(
        confidence=0.9 if exc else 0.75,
        summary=f"{who} raised {exc or m.group(1)}{' at ' + where if where else ''} in DataLoader worker "
        f"{m.group(2)}{f' (sample index {sample})' if sample is not None else ''}; the main process re-raised it"
        + (f"{stale[0]}." if stale is not None else "."),
        evidence=tuple(evidence),
        remedy=remedy + hint,
        pids=(facts.sample.main.pid,) if facts.sample.main else (),
        location=f"{user.file}:{user.line}" if user else traceback_location(facts.stderr_tail),
        docs=(DOC_DATALOADER,),
    )


@rule("dataset_error", SEVERITY_CRASH, 7, CRASH)
def dataset_error(facts: Facts) -> Optional[Finding]:
    """An exception the Dataset raised in a worker (``__getitem__``, ``__getitems__``,
    ``__iter__``): :func:`_worker_exception`."""
    return _worker_exception(facts, STAGE_DATASET)


@rule("collate_error", SEVERITY_CRASH, 7, CRASH)
def collate_error(facts: Facts) -> Optional[Finding]:
    """An exception ``collate_fn`` (PyTorch's ``default_collate`` or the job's) raised in a
    worker while it batched samples that each loaded fine: :func:`_worker_exception`."""
    return _worker_exception(facts, STAGE_COLLATE)


@rule("worker_init_error", SEVERITY_CRASH, 7, CRASH)
def worker_init_error(facts: Facts) -> Optional[Finding]:
    """An exception ``worker_init_fn`` raised as a worker started (``_worker_loop`` calls it
    before any fetch; with ``num_workers=0`` it never runs): :func:`_worker_exception`."""
    return _worker_exception(facts, STAGE_WORKER_INIT)


# Main's memory growth that, read at a crash, counts as the cause of an OOM kill: this much at
# least, fitted this well.
MAIN_GROWTH_MIN_BYTES = 128 * 2**20
MAIN_GROWTH_MIN_R2 = 0.8


@rule("main_killed", SEVERITY_CRASH, 8, CRASH)
def main_killed(facts: Facts) -> Optional[Finding]:
    """The job's main process died of a signal (exit code 128 + N, no Python traceback of its
    own): the OOM killer (SIGKILL, with the memory cgroup's count and main's memory growth),
    an operator or a scheduler (SIGKILL without an OOM record; SIGTERM, which the OOM killer
    never sends), a native crash (SIGSEGV, SIGBUS) or ``abort()`` (SIGABRT: the assertion on
    stderr). Workers' deaths explain main's own errors first (:func:`worker_killed`)."""
    import signal as signals

    code = facts.exit_code
    if code is None or not 128 < code < 128 + 65 or _KILLED.search(facts.stderr_tail or ""):
        return None
    try:
        name = signals.Signals(code - 128).name
    except ValueError:
        name = f"signal {code - 128}"
    main = facts.sample.main
    pid = main.pid if main is not None else None
    evidence = [f"the job's main process{f' (pid {pid})' if pid else ''} ended by {name} (exit code {code})"]
    last = (
        next((p for s in reversed(facts.timeline) for p in [s.process(pid)] if p is not None and p.rss_bytes > 0), None)
        if pid
        else None
    )  # the last sample with its memory (one taken as it was killed has none)
    if last is not None:
        evidence.append(
            f"main pid {pid}: last seen RSS {mib(last.rss_bytes)}, USS {mib(last.uss_bytes)}, private dirty "
            f"{mib(last.dirty_bytes)}" + memory_age(facts, last.pid)
        )
    points = since_last_drop(memory_points(facts, main)) if main is not None else []
    grew = None
    if len(points) >= 4:
        slope, r2 = fit_line(points)
        gained = points[-1][1] - points[0][1]
        span = points[-1][0] - points[0][0]
        if gained >= MAIN_GROWTH_MIN_BYTES and r2 >= MAIN_GROWTH_MIN_R2 and slope > 0:
            grew = (gained, span, slope)
            evidence.append(
                f"main grew steadily: +{mib(gained)} of memory it wrote in {span:.0f} s ({slope / 2**20:.1f} MiB/s)"
            )
    oom = bool(facts.oom_kills)
    limit = max_over_timeline(facts, lambda s: s.host.mem_limit_bytes)
    if oom:
        evidence.append(
            f"the job's memory cgroup counted {facts.oom_kills} OOM kill(s) while it was watched"
            + (f", at its limit of {mib(limit)}" if limit else "")
        )
    asserted = [line.strip() for line in (facts.stderr_tail or "").splitlines() if _ASSERTION.search(line)]
    evidence += [f"stderr: {line}" for line in asserted[-2:]]
    seen_at = last_seen_at(facts, pid) if pid else None
    if seen_at is not None:
        evidence.append(seen_at.evidence("main"))
    kept = kept_persistent_loaders(facts) if name == "SIGKILL" and (oom or grew) else None
    if kept is not None:
        evidence += live_iterator_evidence(facts)
        summary = (
            f"The main process was killed by the OOM killer (SIGKILL) while {kept[0]} DataLoader iterators with "
            f"persistent workers ({kept[1]} workers) were alive at once."
        )
        remedy = (
            kept_loaders_text(kept)
            + (f"; together they reached the cgroup's {mib(limit)} limit" if limit else "")
            + ". Check `dmesg | grep -i -e oom -e killed`."
        )
    elif name == "SIGKILL" and (oom or grew):
        summary = f"The main process was killed by the OOM killer (SIGKILL){' as its memory grew' if grew else ''}."
        remedy = (
            "Main's own memory ran out"
            + (f" at the cgroup's {mib(limit)} limit" if limit else "")
            + ": look for what it keeps per step (losses appended without .item() keep their graphs, batches or "
            "outputs kept in a list, a cache that only grows), free it, or raise the limit. Check `dmesg | grep -i "
            "-e oom -e killed`."
        )
    elif name == "SIGKILL":
        summary = "The main process was killed (SIGKILL) with no OOM kill counted: an operator or a scheduler."
        remedy = (
            "Something outside the job sent SIGKILL: a scheduler (Slurm's time or memory limit, a Kubernetes "
            "eviction or liveness probe), an operator, or the host's OOM killer outside this cgroup; check the "
            "scheduler's log and `dmesg | grep -i -e oom -e killed`."
        )
    elif name == "SIGTERM":
        summary = "The main process was ended by SIGTERM, sent from outside the job."
        remedy = (
            "SIGTERM comes from a process (the OOM killer never sends it): a scheduler preempting or ending the job "
            "(Slurm scancel or its time limit, Kubernetes termination), `kill`, or a launcher stopping its ranks. "
            "Check who: the scheduler's log; handle SIGTERM to save a checkpoint."
        )
    elif name == "SIGABRT":
        summary = "The main process aborted (SIGABRT): a native assertion or an uncaught C++ exception."
        remedy = (
            "A native library called abort(): "
            + (f"it said `{asserted[-1]}`; " if asserted else "")
            + "reproduce under `python -X faulthandler` to get the stack, and check the library's version and input."
        )
    else:
        summary = f"The main process died of {name}: a native crash."
        remedy = (
            "A native library in main crashed: reproduce under `python -X faulthandler` (or gdb) to get the native "
            "stack; check the library's version and the data it was given."
        )
    return Finding(
        confidence=0.9 if (oom or name != "SIGKILL") else 0.75,
        summary=summary,
        evidence=tuple(evidence),
        remedy=remedy,
        pids=(pid,) if pid else (),
        location=traceback_location(facts.stderr_tail or "")
        or (f"{seen_at.frame.file}:{seen_at.frame.line}" if seen_at is not None else None)
        or _loader_site(facts),
        docs=(DOC_MULTIPROCESSING,),
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
        + (f"created by pid(s) {', '.join(map(str, pids))} of this job (the pid is in each name){_exit(facts)}",),
        remedy=f"Remove them once no process of the job runs: rm -f {patterns}",
        pids=tuple(pids),
        docs=(DOC_SHARING_STRATEGIES,),
    )
