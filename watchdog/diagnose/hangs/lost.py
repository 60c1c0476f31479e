"""Hang rules of a loader that waits for what no one will send: a lost batch, the pin-memory
thread, the shutdown's join, uneven inputs across ranks, main stalled outside the loader.
"""

from __future__ import annotations

from typing import Optional

from ... import frames
from ...collect.stderr_facts import stderr_facts
from ...states import WorkerState
from ...types import (
    SEVERITY_HANG,
    Facts,
    LoaderView,
    ProofKind,
    VerdictKind,
)
from ..common import (
    DOC_DATALOADER,
    DOC_MULTI_PROCESS_LOADING,
    brief,
    describe,
    kernel_wait,
    location,
    quiet_text,
    torch_seen,
    waiting_main,
    worker_views,
)
from ..engine import Finding, rule
from .shared import HANG


@rule("batch_lost", SEVERITY_HANG, 18, HANG)
def batch_lost(facts: Facts) -> Optional[Finding]:
    """A batch main waits for will never come: a worker's queue feeder thread failed to pickle or
    send it and dropped it (``multiprocessing.queues.Queue._feed`` prints the error and drops the item), or, proven
    from the outside, every worker sits idle in PyTorch's loop holding no task while main waits."""
    if not facts.loader_hang():
        return None
    failures = stderr_facts(facts).feeder_failures
    idle_proof = facts.proof if facts.proof is not None and facts.proof.kind is ProofKind.LOADER_IDLE else None
    if not failures and idle_proof is None:
        return None
    evidence = [waiting_main(facts)]
    for exc, user in failures[-3:]:
        evidence.append(
            f"stderr: a worker's queue feeder thread failed to send a batch: {exc}"
            + (f" (raised at {user})" if user else "")
        )
    idle = [v.pid for v in worker_views(facts) if v.state is WorkerState.IDLE]
    if idle:
        evidence.append(
            f"workers {', '.join(map(str, idle))} are idle, waiting for new indices (index_queue.get under "
            "_worker_loop): the lost batch will never be re-sent"
        )
    if idle_proof is not None:
        evidence += [f"proof: {line}" for line in idle_proof.lines()]
    why = (
        f"a worker failed to send it to the main process ({failures[-1][0][:240]})"
        if failures
        else "no worker holds it and none is sending it"
    )
    return Finding(
        confidence=0.9 if idle_proof is not None else 0.6,
        summary=f"A batch was lost: {why}, and main waits for it forever.",
        evidence=tuple(evidence),
        remedy=(
            "Make every sample picklable (return tensors, numbers, strings; no open files, locks, sockets or C "
            "handles in the sample or the collate_fn's output); read the feeder thread's traceback on stderr; and set "
            "DataLoader(..., timeout=<seconds>) so a lost batch fails the job instead of hanging it."
        ),
        pids=tuple(w.pid for w in facts.sample.workers),
        location=failures[-1][1] if failures else None,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_DATALOADER),
    )


@rule("pin_memory_stall", SEVERITY_HANG, 12, HANG)
def pin_memory_stall(facts: Facts) -> Optional[Finding]:
    """The pin-memory thread of main (``_pin_memory_loop`` in torch/utils/data/_utils/pin_memory.py)
    is blocked inside pinning (``pin_memory``, a CUDA host allocation) rather than idle in
    ``in_queue.get``, while main waits on its output queue."""
    if not facts.loader_hang() or facts.stall is None:
        return None
    pid = facts.stall.main_pid
    stack = facts.stack(pid)
    if stack is None or not stack.ok:
        return None
    for t in stack.threads:
        if not frames.has_frame(t, frames.PIN_LOOP_FUNCS, frames.PIN_MEMORY_FILE):
            continue
        top = frames.innermost_python(t)
        if (
            top is not None
            and top.function.endswith("Queue.get")
            and not frames.has_frame(t, frames.PIN_WORK_FUNCS, frames.PIN_MEMORY_FILE)
        ):
            continue  # idle: waiting for the next batch from the workers
        cuda = [f for f in t.frames if f.native and "cuda" in (f.function + (f.module or "")).lower()]
        if not (frames.has_frame(t, frames.PIN_WORK_FUNCS, frames.PIN_MEMORY_FILE) or cuda):
            continue
        blocked_at = " ← ".join(describe(facts, pid, f) for f in cuda[:3]) or describe(
            facts, pid, t.frames[0] if t.frames else None
        )
        evidence = (
            waiting_main(facts),
            f"main pid {pid}: pin-memory thread {t.tid} ({t.name or 'pt_data_pin'}) blocked at {blocked_at}, inside "
            f"{describe(facts, pid, top)}",
            f"main pid {pid}: pin-memory thread {t.tid} {kernel_wait(facts, pid, t.tid)}",
        )
        return Finding(
            confidence=0.8,
            summary="The pin-memory thread of the main process is stuck pinning a batch (page-locked host "
            "allocation), so no batch reaches the training loop.",
            evidence=evidence,
            remedy=(
                "Try pin_memory=False to confirm; lower batch_size × prefetch_factor × num_workers (pinned memory is "
                "page-locked and scarce); check the GPU driver (nvidia-smi, dmesg for Xid errors); avoid other threads "
                "creating CUDA contexts while the loader pins."
            ),
            pids=(pid,),
            docs=(DOC_MULTI_PROCESS_LOADING, "https://pytorch.org/docs/stable/data.html#memory-pinning"),
        )
    return None


@rule("shutdown_hang", SEVERITY_HANG, 25, HANG)
def shutdown_hang(facts: Facts) -> Optional[Finding]:
    """Main is stuck shutting the iterator down (``_shutdown_workers`` in dataloader.py: joining
    workers or the pin-memory thread) at the end of an epoch or at interpreter exit, beyond the
    bounded join-with-timeout that PyTorch does per worker."""
    v = facts.verdict
    if (
        v is None
        or facts.stall is None
        or not facts.loader_hang()
        or v.thread is None
        or not frames.has_frame(v.thread, frames.LOADER_SHUTDOWN_FUNCS, frames.DATALOADER_FILE)
    ):
        return None
    pid = facts.stall.main_pid
    top = frames.innermost_python(v.thread)
    user = frames.innermost_user(v.thread)
    evidence = [
        f"main pid {pid}: thread {v.thread.tid} is in _shutdown_workers, waiting at {describe(facts, pid, top)}"
    ]
    if user is not None:
        evidence.append(f"main pid {pid}: reached from {describe(facts, pid, user)}")
    for w in facts.sample.workers:
        evidence.append(f"worker pid {w.pid}: state {w.state}, wchan {w.wchan}, {quiet_text(facts, w.pid)}")
    stack = facts.stack(pid)
    joins_pin = any(f.function.endswith("join") for f in v.thread.frames[:6]) and any(
        frames.has_frame(t, frames.PIN_LOOP_FUNCS) for t in (stack.threads if stack else ())
    )
    return Finding(
        confidence=0.75,
        summary="The main process is stuck shutting a DataLoader iterator down"
        + (" (joining the pin-memory thread)" if joins_pin else "")
        + ".",
        evidence=tuple(evidence),
        remedy=(
            "Exhaust or delete iterators explicitly before exit (del it) and avoid killing workers by hand; with "
            "persistent_workers=True and pin_memory=True upgrade PyTorch (exit-order fixes in pytorch/pytorch#72269); "
            "if a worker is stuck, the worker's stack below shows where."
        ),
        pids=(pid,) + tuple(w.pid for w in facts.sample.workers),
        location=location(user),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


DOC_UNEVEN_INPUTS = "https://pytorch.org/tutorials/advanced/generic_join.html"
# What ends a collective wait if nothing else does (torch/distributed/constants.py:
# default_pg_timeout, default_pg_nccl_timeout; init_process_group(timeout=…) overrides both).
COLLECTIVE_TIMEOUT_TEXT = (
    "left alone, the process group's timeout ends this wait (PyTorch's default: 30 minutes; 10 for NCCL; "
    "init_process_group(timeout=…) sets it): each waiting rank then raises a timeout error from this collective "
    "and the job fails, with no word about the DataLoader"
)


def _epoch_over(v: LoaderView) -> bool:
    """The iterator's epoch has ended: main was in ``__next__`` with no worker owning the next
    batch (StopIteration; the recorder leaves that mark until the next epoch)."""
    return v.batches > 0 and v.waiting_since is not None and v.waiting_worker < 0


@rule("uneven_batches", SEVERITY_HANG, 29, HANG)
def uneven_batches(facts: Facts) -> Optional[Finding]:
    """Ranks of a distributed job whose DataLoaders yield different numbers of batches: the
    rank that runs out leaves the loop for its end-of-epoch collective, the others wait in the
    next step's collective (DDP's gradient all-reduce) for a rank that never joins it, until the
    collective timeout (allenai/allennlp#5088, microsoft/PyMarlin#80). Read from the inside view
    of every rank: the same iterator over, on one rank, while another delivered a different
    count and is still mid-epoch."""
    if facts.rank is None or not facts.peer_loaders or facts.verdict is None or facts.verdict.in_loader:
        return None
    main = facts.sample.main
    own = [v for v in facts.sample.loaders if main is not None and v.pid == main.pid]
    if main is None or not own:
        return None
    latest = {facts.rank: max(own, key=lambda v: v.iterator)}
    for rank, loaders in facts.peer_loaders:
        if loaders:
            latest[rank] = max(loaders, key=lambda v: v.iterator)
    same = {r: v for r, v in latest.items() if v.iterator == latest[facts.rank].iterator}
    over = {r: v for r, v in same.items() if _epoch_over(v)}
    going = {r: v for r, v in same.items() if not _epoch_over(v)}
    if not over or not going or len({v.batches for v in same.values()}) < 2:
        return None
    short = min(over.items(), key=lambda rv: rv[1].batches)
    long = max(going.items(), key=lambda rv: rv[1].batches)
    evidence = [
        f"rank {r}: its DataLoader ({v.label}) ended the epoch after {v.batches} batches; the rank left the loop"
        for r, v in sorted(over.items())
    ] + [
        f"rank {r}: {v.batches} batches delivered in the same epoch, and more to come" for r, v in sorted(going.items())
    ]
    evidence.append(f"rank {facts.rank} (this report): main waits outside the DataLoader: {facts.verdict.reason}")
    evidence.append(COLLECTIVE_TIMEOUT_TEXT)
    where = frames.innermost_user(facts.verdict.thread) if facts.verdict.thread is not None else None
    if where is not None:
        evidence.append(f"rank {facts.rank}: {describe(facts, main.pid, where)}")
    return Finding(
        confidence=0.85,
        summary=(
            f"The ranks' shards are uneven: rank {short[0]}'s DataLoader ran out after {short[1].batches} batches "
            f"while rank {long[0]} delivered {long[1].batches} and has more, so the ranks wait in different "
            "collectives for each other until the collective timeout."
        ),
        evidence=tuple(evidence),
        remedy=(
            "Give every rank the same number of batches: torch.utils.data.distributed.DistributedSampler (it pads the "
            "shards to equal length; drop_last=True trims instead), or split files evenly; for inputs that are uneven "
            "by nature wrap the loop in torch.distributed.algorithms.join.Join([model]) (DDP joins uneven inputs "
            "through it)."
        ),
        pids=(main.pid,),
        location=f"{where.file}:{where.line}" if where is not None else None,
        docs=(DOC_UNEVEN_INPUTS,),
    )


@rule("stall_outside_loader", SEVERITY_HANG, 30, HANG)
def stall_outside_loader(facts: Facts) -> Optional[Finding]:
    """Main's iterating thread stopped outside any DataLoader iterator (a collective, a lock,
    a sleep, user I/O), and no proof shows main deadlocked (``main_thread_deadlock`` covers that)."""
    v, stall = facts.verdict, facts.stall
    if v is None or v.kind is not VerdictKind.OUTSIDE_LOADER or stall is None:
        return None
    pid = stall.main_pid
    if facts.proof is not None and pid in facts.proof.pids:
        return None
    t = v.thread
    evidence = [
        f"main pid {pid}: {v.reason}"
        + ("" if v.confirmed_by_stack else " (from /proc only: py-spy could not read main)")
    ]
    user = None
    collective = None
    timed = False
    if t is not None:
        top = t.frames[0] if t.frames else None
        user = frames.innermost_user(t)
        evidence.append(
            f"main pid {pid}: thread {t.tid} ({t.name or 'MainThread'}) innermost frame {describe(facts, pid, top)}"
        )
        if user is not None and user is not top:
            evidence.append(f"main pid {pid}: in the job's code at {describe(facts, pid, user)}")
        evidence.append(f"main pid {pid}: thread {t.tid} {kernel_wait(facts, pid, t.tid)}")
        detail = facts.detail(pid, t.tid)
        timed = detail is not None and detail.wait is not None and detail.wait.kind.value == "timed"
        collective = next((f for f in t.frames if not f.native and frames.is_collective(f)), None)
        if collective is not None:
            evidence.insert(
                1,
                f"main pid {pid}: waits in a torch.distributed collective, {describe(facts, pid, collective)}: "
                "another rank has not reached it (uneven batches per rank, a crashed or slower rank)",
            )
            evidence.insert(2, COLLECTIVE_TIMEOUT_TEXT)
    else:
        evidence.append(f"main pid {pid}: main thread {kernel_wait(facts, pid, pid)}")
    evidence.append(f"main pid {pid}: {quiet_text(facts, pid)}; {len(facts.sample.workers)} DataLoader worker(s) alive")
    where = f" at {brief(user)}" if user else ""
    if not torch_seen(facts):
        evidence.insert(
            0,
            f"main pid {pid}: no DataLoader worker, no DataLoader iterator and no torch frame was seen in this "
            "process tree",
        )
        return Finding(
            confidence=0.3,
            summary=(
                f"No DataLoader or training loop was seen in pid {pid}; it has waited{where} for {stall.stall_s:.0f} s."
            ),
            evidence=tuple(evidence),
            remedy=(
                f"Check that pid {pid} is the training job's main process, the one that iterates the DataLoader "
                "(`attach --pid` takes that pid; `run` takes the first Python process of the command). dlwatch judges "
                "PyTorch training loops: for any other program this only says how long it has been idle."
            ),
            pids=(pid,),
            location=location(user),
        )
    if collective is not None:
        where += ", in a torch.distributed collective"
    if timed:
        where += " (a timed wait: it ends by itself)"
    return Finding(
        confidence=0.8 if v.confirmed_by_stack else 0.4,
        summary=(
            f"The training loop stopped outside the DataLoader{where}; "
            f"no batch was requested for {stall.stall_s:.0f} s."
        ),
        evidence=tuple(evidence),
        remedy=(
            "Look at main's stack below: the job waits there, not on its data. If that wait is expected (a long "
            "checkpoint, an evaluation, a barrier), raise stall_timeout_s; the watchdog does not end such a job "
            "unless terminate_outside_loader is true and the hang is proven."
        ),
        pids=(pid,),
        location=location(user),
        docs=("https://pytorch.org/docs/stable/distributed.html",) if collective is not None else (),
    )
