"""How a process of the job other than main and its workers ended, in words (issue #34, section
2, "waits on the dead"): which process, when it was last seen and found ended, how it ended (its
exit code or signal from the sampler's exit record, :class:`~watchdog.types.ExitRecord`, or that
no record was kept; what a process that ``multiprocessing`` started recorded itself as it ended,
the inside view's :class:`~watchdog.types.ProcessEnd`: its exit code and uncaught exception), and
the traceback it printed on the stderr dlwatch keeps, when one can be told apart.

A process started with ``multiprocessing`` that raises prints ``Process <name>:`` and then its
traceback, and exits with code 1 (``BaseProcess._bootstrap`` in CPython's
Lib/multiprocessing/process.py). Its pid is not in that text, so a traceback is tied to a
process by the exception line that process recorded itself, else only when nothing else could
have printed it: the stderr holds exactly one traceback of a multiprocessing process that is not
a DataLoader worker, and exactly one ended process exited with code 1 (or left no record). The
sentence then says that it rests on that.
"""

from __future__ import annotations

import re
import time
from typing import List, Optional, Sequence, Set, Tuple, Union

from .. import frames
from ..collect.stderr_facts import TracebackBlock, stderr_facts
from ..types import ExitRecord, Facts, ProcessEnd, ProcessSample, ProcId

# multiprocessing's header above the traceback of a process that raised (process.py _bootstrap).
_PROCESS_HEADER = re.compile(r"^Process (.+):\s*\nTraceback \(most recent call last\):", re.M)
_WORKER_LOOP_FILE = "torch/utils/data/_utils/worker.py"


def exit_record(facts: Facts, p: ProcessSample) -> Optional[ExitRecord]:
    """The exit record of ``p`` (the same pid and start) in the latest sample, or ``None``."""
    key = ProcId(p.pid, p.start_ticks)
    return next((r for r in reversed(facts.sample.exits) if r.ident == key), None)


def record_for(facts: Facts, p: Union[ProcessSample, ExitRecord]) -> Optional[ExitRecord]:
    """``p`` itself when it is an exit record, else :func:`exit_record` of it."""
    return p if isinstance(p, ExitRecord) else exit_record(facts, p)


def helper_tracebacks(facts: Facts) -> List[Tuple[Optional[str], TracebackBlock]]:
    """The tracebacks on the job's stderr that a multiprocessing process other than a DataLoader
    worker printed as it ended (a frame of multiprocessing/process.py, none of PyTorch's worker
    loop), each with the name multiprocessing's ``Process <name>:`` header gave it when the
    headers and the tracebacks pair up one to one (else ``None``)."""
    blocks = [
        b
        for b in stderr_facts(facts).tracebacks
        if b.worker
        and b.exception
        and not any(frames.normalise_path(f.file).endswith(_WORKER_LOOP_FILE) for f, _ in b.frames)
    ]
    names = _PROCESS_HEADER.findall(facts.stderr_tail or "")
    if len(names) == len(blocks):
        return [(name.strip(), b) for name, b in zip(names, blocks)]
    return [(None, b) for b in blocks]


def traceback_of(facts: Facts, record: Optional[ExitRecord], ended: Sequence[ExitRecord]) -> Optional[str]:
    """The sentence that ties a traceback on stderr to ``record`` (see the module's docstring),
    or ``None`` when it cannot be tied to it alone: among every ended process of the job that is
    not a worker (``ended`` and the latest sample's exit records), it must be the only one that
    exited with code 1 or left no record."""
    if record is None or record.signal is not None or record.exit_code not in (None, 1):
        return None
    found = helper_tracebacks(facts)
    workers = {pid for v in (facts.inside.loaders if facts.inside else ()) + facts.sample.loaders for pid in v.workers}
    every = {r.ident: r for r in tuple(facts.sample.exits) + tuple(ended) if r.pid not in workers}
    candidates = [r for r in every.values() if r.signal is None and r.exit_code in (None, 1)]
    if len(found) != 1 or len(candidates) != 1 or candidates[0].ident != record.ident:
        return None
    name, block = found[0]
    user = block.user()
    where = f" in {user.function} at {frames.short_path(user.file)}:{user.line}" if user is not None else ""
    who = f" (as Process {name})" if name else ""
    return (
        f"its traceback on the job's stderr{who}, ending{where}: {block.exception} (the only traceback there of a "
        "multiprocessing process other than a DataLoader worker, and the only process of the job that ended with "
        "code 1 or without a record)"
    )


def inside_end(facts: Facts, pid: int, last_seen_mono: float) -> Optional[ProcessEnd]:
    """How ``pid`` said it ended (the inside view's :class:`~watchdog.types.ProcessEnd`, written
    by a process that ``multiprocessing`` started as it ended), when it said so after it was last
    seen alive (a record of an earlier process with that pid is not its own), or ``None``."""
    ends = facts.inside.ends if facts.inside is not None else ()
    return next(
        (e for e in reversed(ends) if e.pid == pid and e.at_mono is not None and e.at_mono >= last_seen_mono - 1.0),
        None,
    )


def _own_words(facts: Facts, end: ProcessEnd) -> str:
    """What ``end`` says, with the frame its traceback on stderr ends in when one has that very
    exception line: ``it recorded, as it ended, exit code 1 after an uncaught RuntimeError: …``."""
    from ..text import one_line

    who = f" (as Process {one_line(end.name)[:80]})" if end.name else ""
    if end.exception is None:
        return f"it recorded, as it ended{who}, exit code {end.code}"
    exception = one_line(end.exception)[:300]
    block = next((b for _, b in helper_tracebacks(facts) if b.exception == end.exception.strip()), None)
    user = block.user() if block is not None else None
    where = (
        f"; its traceback on the job's stderr ends in {user.function} at {frames.short_path(user.file)}:{user.line}"
        if user is not None
        else ""
    )
    return f"it recorded, as it ended{who}, exit code {end.code} after an uncaught {exception}{where}"


def ended_line(facts: Facts, p: Union[ProcessSample, ExitRecord], ago_s: float, ended: Sequence[ExitRecord]) -> str:
    """One evidence line about ``p`` (its last sample, or its exit record), a process of the job
    that ended ``ago_s`` seconds before the examination's sample: who, when, how (its
    :class:`ExitRecord`, else that none was kept), what it recorded itself as it ended (the
    inside view: :func:`inside_end`), and its traceback on stderr when one is tied to it
    (its own record names the exception; else :func:`traceback_of`)."""
    from .. import redact
    from ..text import one_line

    cmd = one_line(" ".join(redact.cmdline(p.cmdline)) or p.name)[:80]
    record = record_for(facts, p)
    end = inside_end(facts, p.pid, facts.sample.t_mono - ago_s)
    head = f"pid {p.pid} ({cmd}), a process of the job other than main and its workers, has ended"
    if record is None:
        line = f"{head}: last seen {ago_s:.0f} s before the examination"
    else:
        how = record.how() if record.status is not None or end is None else "ended (its parent reaped it first)"
        line = (
            f"{head}: it {how}; last seen alive at "
            f"{time.strftime('%H:%M:%S', time.gmtime(record.last_seen_wall))} UTC ({ago_s:.0f} s before the "
            f"examination), found ended at {time.strftime('%H:%M:%S', time.gmtime(record.ended_wall))} UTC"
        )
    if end is not None:
        return f"{line}; {_own_words(facts, end)}"
    if record is None:
        line += "; no record of how (its traceback, if it printed one, is in the job's stderr)"
    tb = traceback_of(facts, record, ended)
    return f"{line}; {tb}" if tb else line


def older_records(facts: Facts, seen: Set[ProcId]) -> List[ExitRecord]:
    """The exit records of the latest sample whose process is not in ``seen`` (the processes
    the timeline still holds: it keeps ``timeline_samples`` samples, the records every one) and
    that did not exit with code 0 (a helper that finished cleanly long ago is no suspect),
    newest first, leaving out the DataLoader workers the inside view lists."""
    workers = {pid for v in (facts.inside.loaders if facts.inside else ()) + facts.sample.loaders for pid in v.workers}
    found = [r for r in facts.sample.exits if r.ident not in seen and r.exit_code != 0 and r.pid not in workers]
    return sorted(found, key=lambda r: -r.ended_mono)


def records_of(facts: Facts, processes: Sequence[ProcessSample]) -> List[ExitRecord]:
    """The exit records of ``processes`` (those that have one)."""
    return [r for p in processes if (r := exit_record(facts, p)) is not None]
