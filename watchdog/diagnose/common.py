"""Helpers shared by the rules: how to describe frames, quiescence and kernel waits in
evidence lines, and how to gather per-worker hits into one finding. Reads facts only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .. import frames, states
from ..collect.stderr_facts import (  # noqa: F401  (parsed stderr: the rules' names for it)
    STAGE_COLLATE,
    STAGE_DATASET,
    STAGE_WORKER_INIT,
    TB_FILE,
    FatalErrorDump,
    OriginalTraceback,
    TracebackBlock,
    fatal_error_dump,
    original_traceback,
    stderr_traceback_blocks,
    tb_frame,
    traceback_location,
)
from ..types import (
    MODE_HANG,
    EarlierStack,
    Facts,
    Finding,
    Fix,
    Frame,
    HangVerdict,
    LinkKind,
    Measure,
    Polling,
    ProcessSample,
    ProcessStack,
    ProofKind,
    Stall,
    ThreadSample,
    ThreadStack,
    WaitLink,
)

# The fixes that start workers without fork, as ``dlwatch verify`` applies them at the loader.
FORKSERVER = Fix(loader=(("multiprocessing_context", "forkserver"),))
SPAWN = Fix(loader=(("multiprocessing_context", "spawn"),))

DOC_MULTIPROCESSING = "https://pytorch.org/docs/stable/notes/multiprocessing.html"
DOC_MULTI_PROCESS_LOADING = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
DOC_DATALOADER = "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader"
DOC_START_METHODS = "https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods"
DOC_SHARING_STRATEGIES = "https://pytorch.org/docs/stable/multiprocessing.html#sharing-strategies"
DOC_CUDA_FORK = "https://pytorch.org/docs/stable/notes/multiprocessing.html#cuda-in-multiprocessing"
DOC_MEMORY_LEAK = "https://github.com/pytorch/pytorch/issues/13246"
DOC_PIN_MEMORY = "https://pytorch.org/docs/stable/data.html#memory-pinning"

# What a worker is doing, by the family of its kernel wait channel (frames.WCHAN_FAMILIES).
BLOCKED_DOING = {
    "sleep": "sleeping",
    "socket": "waiting on a socket",
    "pipe": "waiting on a pipe",
    "fifo_open": "opening a FIFO with no writer",
    "disk_or_network_fs": "in uninterruptible file-system I/O",
}

# Seconds of tolerance when asking whether a process was quiet for the whole stall.
QUIET_SLACK_S = 2.0


# --- helpers shared by the rules ------------------------------------------------------------


def describe(facts: Facts, pid: int, frame: Optional[Frame]) -> str:
    """``file:line in function: `source``` for a Python frame; the library for a native one."""
    if frame is None:
        return "an unknown frame"
    if frame.native:
        return f"native {frame.function} ({frames.short_path(frame.file)})"
    text = f"{frames.short_path(frame.file)}:{frame.line} in {frame.function}"
    src = facts.source(frame.file, frame.line)
    return f"{text}: `{src}`" if src else text


def location(frame: Optional[Frame]) -> Optional[str]:
    """``file:line`` of a Python frame (full path, as the job sees it)."""
    return None if frame is None or frame.native else f"{frame.file}:{frame.line}"


def quiet_for(facts: Facts, pid: int) -> Optional[float]:
    """Seconds ``pid`` showed no progress, or ``None`` when unknown."""
    return facts.progress_age_s(pid)


def is_quiet(facts: Facts, pid: int) -> bool:
    """True when ``pid`` made no progress during (about) the whole stall."""
    age = quiet_for(facts, pid)  # None without a stall
    return age is not None and facts.stall is not None and age >= facts.stall.stall_s - QUIET_SLACK_S


def hang_of(facts: Facts) -> Tuple[Stall, HangVerdict]:
    """The stall and the verdict of a hang's facts, which always carry both (:class:`Facts`)."""
    if facts.stall is None or facts.verdict is None:
        raise ValueError(f"{facts.mode} facts without a stall and a verdict: only a hang's facts have both")
    return facts.stall, facts.verdict


def kernel_wait(facts: Facts, pid: int, tid: int) -> str:
    """``state S, wchan futex_do_wait, syscall 202`` for one thread (from ``/proc``)."""
    for t in facts.threads_of(pid):
        if t.tid == tid:
            return f"state {t.state}, wchan {t.wchan or '?'}, {t.wait.detail if t.wait else 'system call unknown'}"
    return "state unknown (thread not readable)"


def worker_thread(stack: Optional[ProcessStack], pid: int) -> Optional[ThreadStack]:
    """The thread that runs the worker loop (or the process's main thread)."""
    if stack is None or not stack.ok:
        return None
    return frames.worker_loop_thread(stack.threads) or next((t for t in stack.threads if t.tid == pid), None)


def waiting_main(facts: Facts) -> str:
    """``main pid N: <verdict reason>, iterating at file:line`` (main's side of a hang)."""
    stall, v = hang_of(facts)
    how = "" if v.confirmed_by_stack else " (presumed from /proc: py-spy could not read main)"
    t = v.thread
    where = ""
    if t is not None:
        frame = frames.innermost_user(t) or frames.innermost_python(t)
        where = f", iterating at {describe(facts, stall.main_pid, frame)}" if frame else ""
    return f"main pid {stall.main_pid}: {v.reason}{where}{how}"


def brief(frame: Optional[Frame]) -> str:
    """``file:line (function)`` with a short path, for one-sentence summaries."""
    if frame is None:
        return "an unknown place"
    return f"{frames.short_path(frame.file)}:{frame.line} ({frame.function})"


def quiet_text(facts: Facts, pid: int) -> str:
    """How long ``pid`` made no progress, in the stall's measure: ``no CPU, I/O or
    context-switch progress for N s``, or under the batch measure ``no new sample for N s
    (X s of CPU, Y KiB of I/O meanwhile)``."""
    age = quiet_for(facts, pid)
    if age is None:
        return "no progress seen"
    stall = facts.stall
    if stall is not None and stall.measure in (Measure.BATCHES, Measure.MAIN_WAIT):
        work = {w.pid: (w.cpu_s, w.io_bytes) for w in stall.loader_work}.get(pid)
        spent = (
            f" ({work[0]:.2f} s of CPU, {work[1] / 1024:.0f} KiB of I/O in the last {stall.work_window_s:.0f} s)"
            if work
            else ""
        )
        what = "no new sample" if stall.measure == Measure.BATCHES else "no batch"
        return f"{what} for {age:.0f} s{spent}"
    return f"no CPU, I/O or context-switch progress for {age:.0f} s"


def chain_of(facts: Facts, pid: int) -> Tuple[WaitLink, ...]:
    """The wait chain that starts at ``pid`` (``Facts.chains``), or ``()``."""
    return next((c for c in facts.chains if c and c[0].pid == pid), ())


_LINK_TEXT = {
    LinkKind.PIPE: "{verb} {target}{stdio}, whose {end} end pid(s) {peer} hold",
    LinkKind.TCP: "waits on a TCP connection to {peer} ({target})",
    LinkKind.UNIX: "waits on a Unix socket {peer} ({target})",
    LinkKind.SOCKET: "waits on {target}",
    LinkKind.FUSE: "waits on {target}, a file on the FUSE mount {peer}",
    LinkKind.NFS: "waits on {target}, a file on the NFS mount {peer}",
    LinkKind.FIFO: "waits on the FIFO {target}",
    LinkKind.TERMINAL: "waits for input on the terminal {target}",
    LinkKind.FILE: "waits on the file {target}",
    LinkKind.CHILD: "waits for its child pid(s) {peer} to exit",
    LinkKind.LOCK: "waits for a lock on {target}",
    LinkKind.OTHER: "waits ({wait})",
}


_STDIO = {0: " (its standard input)", 1: " (its standard output)", 2: " (its standard error)"}


def chain_text(chain: Sequence[WaitLink]) -> str:
    """``wait chain: pid 7 (python) reads or writes pipe:[5] … → pid 9 (curl) waits on a TCP
    connection to 127.0.0.1:80 (socket:[8])``."""
    hops = [
        f"pid {x.pid} ({x.name}) "
        + _LINK_TEXT[x.kind].format(
            target=x.target,
            peer=x.peer or "unknown",
            wait=x.wait,
            verb="reads" if x.reading else "writes",
            end="write" if x.reading else "read",
            stdio=_STDIO.get(x.fd, "") if x.fd is not None else "",
        )
        for x in chain
    ]
    return "wait chain: " + " → ".join(hops)


def chain_remedy(chain: Sequence[WaitLink]) -> Optional[str]:
    """The remedy for what a wait chain ends at, or ``None`` when its end has none of its own
    (a plain file, a pipe whose writer could not be followed)."""
    if not chain:
        return None
    end = chain[-1]
    who = f"pid {end.pid} ({end.name})"
    if end.kind is LinkKind.TCP:
        bound = "curl --max-time <seconds>" if end.name == "curl" else "wget --timeout" if end.name == "wget" else ""
        return (
            f"{who} waits on a TCP connection to {end.peer} that never answers, with no timeout: check the service "
            f"at {end.peer}, and give the call a timeout ({bound or 'socket.settimeout, the client library’s timeout'})"
            " so that it fails and can be retried; DataLoader(..., timeout=<seconds>) makes main fail instead of "
            "waiting."
        )
    if end.kind is LinkKind.FUSE:
        point = end.peer.split(" ")[0]
        abort = (
            f"echo 1 > /sys/fs/fuse/connections/{end.fuse_connection}/abort"
            if end.fuse_connection is not None
            else "echo 1 > /sys/fs/fuse/connections/<N>/abort"
        )
        return (
            f"The FUSE file system at {point} ({end.peer.split(' ')[-1]}) does not answer: its daemon is stuck or "
            "gone. Processes waiting on it (state D) cannot be ended by any signal, kill -9 included: abort the "
            f"connection as root ({abort}) or detach the mount (umount -l {point}), then restart the FUSE daemon; "
            "mount it with a request timeout where it has one, or copy the data to local disk."
        )
    if end.kind is LinkKind.NFS:
        point = end.peer.split(" ")[0]
        return (
            f"The NFS server of {point} does not answer. Processes waiting on a hard mount cannot be ended until it "
            f"does: check the server and the network, or `umount -f -l {point}`; mount with `soft,timeo=…,retrans=…` "
            "so reads fail instead of hanging, or copy the data to local disk."
        )
    if end.kind is LinkKind.TERMINAL:
        return (
            f"{who} waits for an answer on the terminal {end.target}: a prompt nobody answers (unzip's "
            "'replace …? [y]es, [n]o', a password or confirmation prompt). Run it with no terminal "
            "(stdin=subprocess.DEVNULL) and with the flag that never asks (unzip -o or -n, apt-get -y, "
            "ssh -o BatchMode=yes)."
        )
    if end.kind is LinkKind.PIPE and len(chain) > 1 and end.pid != chain[0].pid and str(chain[0].pid) in end.peer:
        return (
            f"{who} waits for input on {end.target}{_STDIO.get(end.fd, '') if end.fd is not None else ''}, "
            f"which only pid {chain[0].pid} can write, and pid "
            f"{chain[0].pid} waits for {who}: give the child its input and close it (subprocess.run(..., input=…)), "
            "or start it with stdin=subprocess.DEVNULL and a flag that never asks (unzip -o)."
        )
    return None


def polling_of(facts: Facts, pid: int) -> Optional[Polling]:
    """The first thread of ``pid`` seen polling at one line (:class:`~watchdog.types.Polling`)."""
    return next((x for x in facts.polling if x.pid == pid), None)


def lock_holders(facts: Facts, pid: int) -> List[str]:
    """``PATH is locked (POSIX WRITE) by pid 7 (main)`` for each lock another process holds on
    a file ``pid`` has open (``Facts.file_locks``)."""
    held: Dict[Tuple[str, Optional[int]], List[str]] = {}
    for lock in facts.file_locks:
        if lock.opener == pid:
            modes = held.setdefault((lock.path, lock.holder), [])
            if f"{lock.kind} {lock.mode}" not in modes:
                modes.append(f"{lock.kind} {lock.mode}")
    out = []
    for (path, pid_held), modes in held.items():
        holder = facts.sample.process(pid_held) if pid_held is not None else None
        who = (
            f"pid {pid_held} ({holder.role})"
            if holder is not None
            else (f"pid {pid_held}, outside the job" if pid_held is not None else "an open file description")
        )
        out.append(f"{path} is locked ({', '.join(modes)}) by {who}")
    return out


@dataclass(frozen=True)
class WorkerView:
    """One DataLoader worker as every hang rule sees it, decided once per facts.

    ``loop`` is the thread that runs (or should run) the worker loop and ``loop_detail`` its
    ``/proc`` details; ``state`` what the loop does (:class:`~watchdog.states.WorkerState`);
    ``activity`` how the loop thread waits (:class:`~watchdog.states.Activity`); ``others`` the
    worker's other threads that could hold a lock (not idle queue feeder threads); ``proven``
    whether the facts' proof covers this worker; ``top`` and ``user`` the loop thread's innermost
    frame and innermost frame of the user's code.
    """

    proc: ProcessSample
    stack: Optional[ProcessStack]
    loop: Optional[ThreadStack]
    loop_detail: Optional[ThreadSample]
    state: states.WorkerState
    activity: states.Activity
    others: Tuple[ThreadStack, ...]
    quiet: bool
    proven: bool
    top: Optional[Frame]
    user: Optional[Frame]

    @property
    def pid(self) -> int:
        return self.proc.pid


def worker_views(facts: Facts) -> Tuple[WorkerView, ...]:
    """Every worker of the sample as a :class:`WorkerView`, computed once per facts and kept
    with them (:meth:`~watchdog.types.Facts.derived`): nothing is kept between two facts, nor
    shared by the threads that examine several ranks at once."""
    return facts.derived(_make_worker_views)


def _make_worker_views(facts: Facts) -> Tuple[WorkerView, ...]:
    proven_pids = set(facts.proof.pids) if facts.proof is not None and facts.proof.kind is ProofKind.KERNEL else set()
    out = []
    for w in facts.sample.workers:
        stack = facts.stack(w.pid)
        loop = worker_thread(stack, w.pid)
        tid = loop.tid if loop is not None else w.pid
        detail = facts.detail(w.pid, tid)
        others = (
            tuple(x for x in stack.threads if loop is not None and x.tid != loop.tid and not states.is_loader_idle(x))
            if stack and stack.ok
            else ()
        )
        out.append(
            WorkerView(
                proc=w,
                stack=stack,
                loop=loop,
                loop_detail=detail,
                state=states.worker_state(loop),
                activity=states.activity(detail.wait if detail else None, loop),
                others=others,
                quiet=facts.stall is not None and is_quiet(facts, w.pid),
                proven=w.pid in proven_pids,
                top=loop.frames[0] if loop is not None and loop.frames else None,
                user=frames.innermost_user(loop) if loop is not None else None,
            )
        )
    return tuple(out)


def loader_stalled_on(facts: Facts, view: WorkerView) -> bool:
    """True when a hang rule may speak of this worker: main waits in the loader (a DataLoader
    hang) or the proof shows the worker can never run again."""
    return facts.mode == MODE_HANG and (facts.loader_hang() or view.proven)


def gather(facts: Facts, hit) -> Optional[Tuple[Tuple[str, ...], Tuple[int, ...], Optional[Frame], float]]:
    """Apply ``hit(facts, view) -> (confidence, evidence lines, user frame) | None`` to every
    worker a hang rule may speak of; ``(evidence, pids, first user frame, confidence)`` with
    main's wait first, or ``None`` when no worker matched."""
    hits = [
        (v, h) for v in worker_views(facts) if loader_stalled_on(facts, v) for h in [hit(facts, v)] if h is not None
    ]
    if not hits:
        return None
    head = [waiting_main(facts)] if facts.loader_hang() else []
    evidence = head + [line for _, h in hits for line in h[1]]
    user = next((h[2] for _, h in hits if h[2] is not None), None)
    return tuple(evidence), tuple(v.pid for v, _ in hits), user, max(h[0] for _, h in hits)


def worker_finding(
    facts: Facts,
    hit,
    state: str,
    remedy: str,
    docs: Tuple[str, ...],
    adapt: Optional[Callable[[Tuple[int, ...]], Optional[Tuple[str, str]]]] = None,
) -> Optional[Finding]:
    """A finding whose summary is ``N DataLoader workers are <state>``, where ``state`` may use
    ``{where}`` for the user's ``file:line`` and ``{their}`` for ``its``/``their``; ``None`` when
    no worker matched ``hit``. ``adapt(pids)``, when given, may return another ``(state,
    remedy)`` for the workers found (a rule whose cause depends on which they are)."""
    found = gather(facts, hit)
    if found is None:
        return None
    evidence, pids, user, confidence = found
    chosen = adapt(pids) if adapt is not None else None
    if chosen is not None:
        state, remedy = chosen
    if facts.proof is not None and any(facts.proof.links_of(pid) for pid in pids):
        evidence += (f"proof: {facts.proof.conclusion}",)
    where = f" at {brief(user)}" if user else ""
    return Finding(
        confidence=confidence,
        summary=f"{workers_phrase(len(pids))} {state.format(where=where, their='its' if len(pids) == 1 else 'their')}",
        evidence=evidence,
        remedy=remedy,
        pids=pids,
        location=location(user),
        docs=docs,
    )


def stderr_lines(facts: Facts, pattern: "re.Pattern[str]") -> List[str]:
    """Lines of the job's stderr tail that match ``pattern``, in order, stripped."""
    return [line.strip() for line in facts.stderr_tail.splitlines() if pattern.search(line)]


def max_over_timeline(facts: Facts, value) -> Optional[float]:
    """The largest non-None ``value(sample)`` over the timeline, or ``None``."""
    values = [v for v in (value(s) for s in facts.timeline) if v is not None]
    return max(values) if values else None


def mib(n: Optional[float]) -> str:
    """Bytes as MiB for evidence lines."""
    return "unknown" if n is None else f"{n / 2**20:.1f} MiB"


def seconds(s: float) -> str:
    """``3.2 s`` below 10 s, ``18 s`` above: a duration for an evidence line."""
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


@dataclass(frozen=True)
class LastSeenAt:
    """Where a process was at the last stack taken of it while it ran (an
    :class:`~watchdog.types.EarlierStack`): ``frame``, the line of the job's own code it was
    in, ``inner`` its thread's innermost Python frames, and ``before_s`` how many seconds
    before the last sample that was."""

    earlier: EarlierStack
    frame: Frame
    inner: Tuple[Frame, ...]
    before_s: float

    def evidence(self, role: str) -> str:
        """One evidence line that says what this is and what it is not."""
        inner = " ← ".join(f"{f.function} ({frames.short_path(f.file)}:{f.line})" for f in self.inner[:3])
        return (
            f"{role} pid {self.earlier.pid} at the {self.earlier.why} warning, {seconds(self.before_s)} before its "
            f"last sample (py-spy --nonblocking): in {self.frame.function} at {self.frame.file}:{self.frame.line}; "
            f"innermost frames: {inner}. It died with no traceback: this is the line it was in then, the last one "
            "known"
        )


def last_seen_at(facts: Facts, pid: int) -> Optional[LastSeenAt]:
    """Where ``pid`` was at its latest stack in ``facts.earlier_stacks``, or ``None``. In a
    DataLoader worker (a thread in ``_worker_loop``), the line is the Dataset's: the outermost
    frame of the job's own files that torch's fetcher called (``MyDataset.__getitem__``'s
    line, even while it is in a helper it calls); elsewhere the thread's innermost frame of the
    job's own files (:func:`watchdog.frames.innermost_user`)."""
    earlier = next((e for e in reversed(facts.earlier_stacks) if e.pid == pid), None)
    if earlier is None or not earlier.stack.threads:
        return None
    thread = frames.worker_loop_thread(earlier.stack.threads) or earlier.stack.threads[0]
    python = frames.python_frames(thread)
    frame = _dataset_frame(python) if frames.worker_loop_thread(earlier.stack.threads) else None
    frame = frame or frames.innermost_user(thread)
    if frame is None:
        return None
    last_wall = next((smp.wall for smp in reversed(facts.timeline) if smp.process(pid) is not None), None)
    return LastSeenAt(earlier, frame, python, max(0.0, (last_wall or facts.sample.wall) - earlier.wall))


def _dataset_frame(python: Sequence[Frame]) -> Optional[Frame]:
    """The outermost frame of the job's own files in the innermost run of them that a torch
    frame called (``python`` innermost first), or ``None``."""
    own: Optional[Frame] = None
    for f in python:
        if frames.is_user(f) and not frames.is_third_party(f):
            own = f
        elif own is not None and frames.is_torch(f):
            return own
    return own


def workers_phrase(n: int) -> str:
    """``1 DataLoader worker is`` / ``3 DataLoader workers are``."""
    return "1 DataLoader worker is" if n == 1 else f"{n} DataLoader workers are"


def torch_seen(facts: Facts) -> bool:
    """Whether anything shows that the watched job trains with PyTorch: a DataLoader worker in
    any sample of the timeline, an iterator in the inside view, or a frame of ``torch`` on any
    stack taken. ``False`` for a Python program that never touched it (``attach`` to the
    wrong pid): then no verdict about a training loop can be drawn."""
    if facts.inside is not None and facts.inside.loaders:
        return True
    if any(s.workers for s in facts.timeline) or facts.sample.workers:
        return True
    for _pid, stack in facts.stacks:
        for t in stack.threads:
            if any(("/torch/" in f.file or f.file.startswith("torch/")) for f in t.frames if not f.native):
                return True
    return False


def fit_line(points: List[Tuple[float, float]]) -> Tuple[float, float]:
    """Least-squares slope and R² of ``(x, y)`` points (x in seconds, y in bytes)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    syy = sum((y - my) ** 2 for _, y in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    if sxx == 0 or syy == 0:
        return 0.0, 0.0
    return sxy / sxx, (sxy * sxy) / (sxx * syy)


def written(p: ProcessSample) -> Optional[int]:
    """The private memory ``p`` wrote (``dirty_bytes``: smaps_rollup Private_Dirty), else its
    USS when that was not read: clean file pages it only read (a memmap, page cache of files it
    maps) are reclaimable and not a leak, nor what one more worker costs."""
    return p.dirty_bytes if p.dirty_bytes is not None else p.uss_bytes


def memory_points(facts: Facts, w) -> List[Tuple[float, float]]:
    """``(t_mono, bytes written)`` of process ``w`` over the timeline (:func:`written`), one
    point per change (:func:`memory_series`, computed once per facts and kept with them: the
    rules of one look ask for one process after another). A new list: the caller may change it."""
    return list(facts.derived(_timeline_series).get((w.pid, w.start_ticks), ()))


def _timeline_series(facts: Facts) -> Dict[Tuple[int, int], List[Tuple[float, float]]]:
    return memory_series(facts.timeline)


def memory_series(timeline: Sequence) -> Dict[Tuple[int, int], List[Tuple[float, float]]]:
    """``(t_mono, bytes written)`` points of every process of ``timeline`` (samples, oldest
    first), keyed by ``(pid, start_ticks)`` (that process, not another under its pid), one
    point per change of :func:`written`: one pass over the timeline, a sample object seen at
    the sample before (the sampler keeps a process's unchanged sample) skipped, and so is a
    lean sample, whose processes are its full sample's, the same tuple (NOTE [ Lean ticks ] in
    watchdog/collect/read_plan.py)."""
    series: Dict[Tuple[int, int], List[Tuple[float, float]]] = {}
    last: Dict[Tuple[int, int], Optional[int]] = {}
    seen: Dict[Tuple[int, int], ProcessSample] = {}
    before: Optional[tuple] = None
    for s in timeline:
        if s.processes is before:
            continue
        before = s.processes
        for p in s.processes:
            key = (p.pid, p.start_ticks)
            if seen.get(key) is p:
                continue
            seen[key] = p
            value = written(p)
            if value is not None and value != last.get(key):
                series.setdefault(key, []).append((s.t_mono, float(value)))
                last[key] = value
    return series


def since_last_drop(points: List[Tuple[float, float]], drop: float = 0.1) -> List[Tuple[float, float]]:
    """The points after the last fall of more than ``drop`` (a share) from one point to the
    next: a process's private memory falls when it forks (its pages become shared with the
    children) or frees a cache, and a growth is measured from there."""
    start = 0
    for i in range(1, len(points)):
        if points[i][1] < (1 - drop) * points[i - 1][1]:
            start = i
    return points[start:]
