"""Helpers of the job that ended or became another program: the helpers whose end the workers
may wait for (:func:`ended_helpers`), and workers that ``exec``'d (``worker_exec``).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from ... import frames
from ...collect.stderr_facts import parse_stderr
from ...types import (
    ROLE_OTHER,
    ROLE_STARTING,
    SEVERITY_HANG,
    ExitRecord,
    Facts,
    ProcessSample,
    ProcId,
)
from ..common import (
    DOC_DATALOADER,
    DOC_MULTI_PROCESS_LOADING,
    waiting_main,
)
from ..engine import Finding, rule
from .shared import HANG


def cmd(p: Union[ProcessSample, ExitRecord]) -> str:
    """A process's command line for a line of ours: redacted, on one line, cut to 80 characters."""
    from ... import redact
    from ...text import one_line

    return one_line(" ".join(redact.cmdline(p.cmdline)) or p.name)[:80]


def ended_helpers(facts: Facts) -> List[Tuple[ProcessSample, float]]:
    """Processes of the job other than main and its workers (a producer, a decoder, a lock
    holder: role ``other``, or a fork of main that ended before it could be told apart,
    ``worker_starting``, and that no loader lists as its worker) that the timeline saw and the
    latest sample no longer holds, with how long before that sample each was last seen, most
    recent first. A wait that only such a
    process could end cannot end; which wait it was is not known from outside, so this is said,
    not proven. A zombie (state ``Z``: ended, not yet reaped by its parent) counts as ended."""
    if not facts.timeline:
        return []
    now = facts.sample
    alive = {p.pid for p in now.processes if p.state != "Z"}  # a zombie has ended: nobody reaped it yet
    last: Dict[int, Tuple[ProcessSample, float]] = {}
    workers = {p.pid for sample in facts.timeline for p in sample.workers}
    workers |= {pid for v in (facts.inside.loaders if facts.inside else ()) for pid in v.workers}
    for sample in facts.timeline:
        for p in sample.processes:
            if p.role in (ROLE_OTHER, ROLE_STARTING) and p.state != "Z" and p.pid not in workers:
                last[p.pid] = (p, sample.t_mono)
    gone = [(p, now.t_mono - t) for pid, (p, t) in last.items() if pid not in alive]
    return sorted(gone, key=lambda item: item[1])


# --- lost batches, the pin thread, shutdown, and main outside the loader ----------------------


def feeder_failures(stderr: str) -> List[Tuple[str, Optional[str]]]:
    """``(exception line, user file:line)`` for each traceback in ``stderr`` printed by a
    multiprocessing queue feeder thread (``StderrFacts.feeder_failures``)."""
    return list(parse_stderr(stderr).feeder_failures)


def exec_workers(facts: Facts) -> List[Tuple[ProcessSample, ProcessSample]]:
    """``(as a worker, now)`` for each process of the job that was a DataLoader worker in the
    timeline and now, the same process (its :class:`~watchdog.types.ProcId`), runs another
    program: another name and command line, whatever role it has now (a role is decided once,
    and may be decided again after the name changed)."""
    now = {p.ident: p for p in facts.sample.processes}
    out: Dict[ProcId, Tuple[ProcessSample, ProcessSample]] = {}
    for s in facts.timeline:
        for w in s.workers:
            p = now.get(w.ident)
            if p is not None and p.name != w.name and p.cmdline != w.cmdline and p.name not in frames.WORKER_COMMS:
                out.setdefault(w.ident, (w, p))
    return list(out.values())


@rule("worker_exec", SEVERITY_HANG, 14, HANG)
def worker_exec(facts: Facts) -> Optional[Finding]:
    """A DataLoader worker replaced itself with another program (``os.exec*`` in the Dataset,
    ``worker_init_fn`` or ``collate_fn``): the pid lives on, so PyTorch's worker checks
    (``_MultiProcessingDataLoaderIter._try_get_data``: a worker that *exited*) never fire, and
    the batch it owned never comes. Seen from outside (a worker pid whose command line changed)
    and, with the inside view, from the worker's own record of the call."""
    if not facts.loader_hang():
        return None
    changed = exec_workers(facts)
    records = {e.pid: e for e in (facts.inside.execs if facts.inside else ())}
    pids = sorted({now.pid for _was, now in changed} | set(records))
    if not pids:
        return None
    evidence = [waiting_main(facts)]
    location = None
    for was, now in changed:
        shown = " ".join(now.cmdline)[:200] or now.name
        evidence.append(
            f"pid {now.pid}: a DataLoader worker ({was.name}) until it became `{shown}` (the same process, "
            "its start time unchanged): it replaced itself with another program, so it no longer serves the DataLoader"
        )
    for pid in pids:
        record = records.get(pid)
        if record is None:
            continue
        user = [f for f in record.frames if frames.is_user(f)]
        at = user[-1] if user else (record.frames[-1] if record.frames else None)
        if at is not None:
            location = location or f"{at.file}:{at.line}"
            evidence.append(
                f"pid {pid} recorded, just before: exec of {record.path} from {at.file}:{at.line} ({at.function})"
            )
    program = changed[0][1].name if changed else records[pids[0]].path
    return Finding(
        confidence=0.95,
        summary=(
            f"DataLoader worker pid {pids[0]} replaced itself with another program ({program}): the batch it owned "
            "never comes, and main waits for it forever."
        ),
        evidence=tuple(evidence),
        remedy=(
            "A DataLoader worker must stay the Python process PyTorch started: run another program with "
            "subprocess.run([...], check=True), which returns when it ends, instead of os.exec* (which replaces the "
            "worker) in the Dataset, worker_init_fn or collate_fn; and set DataLoader(..., timeout=<seconds>) so a "
            "worker that stops answering fails the job instead of hanging it."
        ),
        pids=tuple(pids),
        location=location,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_DATALOADER),
    )
