"""What the timeline says of a dead process's memory, for the crash rules that explain a kill:
a data file that shrank under a worker's mapping (SIGBUS), one allocation that ended a worker
(a step in its RSS, not a slope), how old the slow-cadence memory figures were, and what to
change for a worker the OOM killer ended. Reads facts only (the timeline, the inside view)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ...types import ROLE_WORKER, Facts
from ..common import mib, seconds

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


def worker_batch(facts: Facts, pid: int) -> Optional[str]:
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


def step_evidence(facts: Facts, pid: int, step: MemoryStep, limit: Optional[float]) -> str:
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


def memory_remedy(facts: Facts, pids: Sequence[int], limit: Optional[float]) -> str:
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
    they were read at that sample or never. They are read every ``memory_read_base_interval_s`` or less often, and
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
