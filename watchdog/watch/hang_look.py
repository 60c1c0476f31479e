"""The closer look of a hang report and the facts it rests on: which processes to dump in full
(main, the workers, a forkserver that forked them), which source lines to read with them (each
user frame and the lines above it where a ``with LOCK:`` or ``LOCK.acquire()`` holding it
would be), and the one :class:`~watchdog.types.Facts` record the diagnosis reads."""

from __future__ import annotations

from typing import List, Optional, Tuple

from .. import detect, frames
from ..collect import examine, pyspy
from ..collect.examine import CloserLook
from ..types import MODE_HANG, ROLE_FORKSERVER, ROLE_OTHER, Evidence, Facts, InsideView, Measure, Proof, Sample, Stall

# Threads per process, and user frames per thread, whose enclosing lines are read.
_THREADS, _FRAMES = 16, 6
# Children of main dumped as the possible server of a multiprocessing.Manager that workers wait on.
MANAGERS = 2


def enclosing_lines(threads) -> List[Tuple[str, int]]:
    """Source lines to read for ``threads`` (records with ``frames``: a fork record's threads,
    a worker's py-spy threads): each user frame's line and the
    :data:`~watchdog.frames.ENCLOSING_LINES` above it
    (``watchdog.diagnose.hangs.holds_at`` reads them)."""
    wanted = []
    for t in list(threads)[:_THREADS]:
        for f in [f for f in t.frames if frames.is_user(f)][:_FRAMES]:
            wanted += [(f.file, line) for line in range(max(1, f.line - frames.ENCLOSING_LINES), f.line + 1)]
    return wanted


def closer_look(
    sample: Sample,
    stall: Stall,
    evidence: Evidence,
    proof: Optional[Proof],
    view: InsideView,
    pyspy_path: Optional[str],
    py_spy,
    deadline: float,
) -> CloserLook:
    """:func:`examine.look_closer` at main, the workers and a forkserver that forked them (its
    threads are those at the fork), with the enclosing lines of the threads main had at each
    fork and of each worker's threads; the polling look first under the batch and main-wait
    measures when nothing is proven (NOTE [ Hang criterion ] in detect/progress.py). ``deadline``
    (``time.monotonic()`` seconds) bounds the py-spy runs."""
    main = sample.main
    pids = ([main.pid] if main is not None else []) + [w.pid for w in sample.workers]
    pids += [p.pid for p in sample.processes if p.role == ROLE_FORKSERVER]
    if main is not None and any(
        frames.manager_call(t) is not None
        for w in sample.workers
        if (st := evidence.stacks.get(w.pid))
        for t in st.threads
    ):  # a worker waits on a multiprocessing.Manager: its server is a child of main (managers.py: BaseManager.start)
        pids += [p.pid for p in sample.processes if p.ppid == main.pid and p.role == ROLE_OTHER][:MANAGERS]
    return examine.look_closer(
        sample,
        evidence,
        pids,
        pyspy_path,
        py_spy,
        deadline,
        poll=stall.measure in (Measure.BATCHES, Measure.MAIN_WAIT) and proof is None,
        more_sources=[(record.pid, enclosing_lines(record.threads)) for record in view.forks]
        + [(w.pid, enclosing_lines(st.threads)) for w in sample.workers if (st := evidence.stacks.get(w.pid))],
    )


def hang_facts(
    sample: Sample,
    stall: Stall,
    evidence: Evidence,
    assessment: detect.Assessment,
    closer: CloserLook,
    view: InsideView,
    *,
    timeline: Tuple[Sample, ...],
    main_threads_at_fork: Tuple[Tuple[int, int], ...],
    stderr_tail: str,
    oom_kills: Optional[int],
    host_cpus: int,
    rank: Optional[str],
    peer_loaders: tuple,
    pyspy_timeout_s: float,
) -> Facts:
    """The facts of a hang report: the stalled ``sample`` and its ``stall``, the examination's
    ``evidence`` and ``assessment`` (verdict, proof), the ``closer`` look, the inside ``view``
    at report time, and what the watcher kept (the ``timeline``, main's thread counts before
    each worker appeared, the job's stderr tail, OOM kills in its memory cgroup, the host's
    CPUs, the rank and the other ranks' loaders)."""
    poll, pipes = closer.poll, evidence.pipes
    return Facts(
        mode=MODE_HANG,
        sample=sample,
        timeline=timeline,
        stall=stall,
        verdict=assessment.verdict,
        stacks=tuple(sorted(closer.stacks.items())),
        thread_details=tuple(sorted(evidence.stable.items())),
        main_threads_at_fork=main_threads_at_fork,
        source_lines=closer.source_lines,
        pyspy_problem=pyspy.problem_summary(dict(closer.stacks), pyspy_timeout_s),
        stderr_tail=stderr_tail,
        oom_kills=oom_kills,
        host_cpus=host_cpus,
        open_files=closer.open_files,
        proof=assessment.proof,
        assessment=assessment.reason,
        fd_targets=tuple(sorted(pipes.targets.items())) if pipes else (),
        pipe_readers=tuple(sorted(pipes.readers.items())) if pipes else (),
        pipe_writers=tuple(sorted(pipes.writers.items())) if pipes else (),
        worker_start_ticks=closer.worker_start_ticks,
        inside=view,
        rank=rank,
        peer_loaders=peer_loaders,
        polling=detect.polling(evidence.stacks, poll.later, poll.before, poll.after, poll.gap_s) if poll else (),
        file_locks=closer.file_locks,
        chains=closer.chains,
        opening=closer.opening,
        lock_files=closer.lock_files,
    )
