"""Build a report from the facts and diagnoses: ``report.json``'s document (and those of
``dlwatch status`` and ``dlwatch dump``); its text is rendered by :mod:`watchdog.report.rendering`.
Pure: reads records, writes nothing.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import asdict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .. import frames, redact
from ..text import printable
from ..types import (
    ROLE_FORKSERVER,
    ROLE_MAIN,
    ROLE_WORKER,
    Diagnosis,
    Facts,
    ForkRecord,
    Frame,
    InsideView,
    LoaderView,
    ProcessRole,
    ProcessSample,
    ProcessStack,
    Report,
    Sample,
    ThreadSample,
)
from .rendering import text_lines

# report.json's version; its shape is watchdog/report/schema/report.schema.json. New optional keys may
# come within a version; renaming or removing a key, or changing its type, bumps it.
SCHEMA_VERSION = 2


def utc_iso(wall: float) -> str:
    """``wall`` (``time.time()`` seconds) as an ISO 8601 UTC stamp."""
    return _dt.datetime.fromtimestamp(wall, _dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def folder_name(wall: float, pid: int, node: str = "") -> str:
    """``<UTC timestamp>-[<node>-]<pid>``, e.g. ``20261129T140512Z-node-b-2084``: sortable by
    time, and never the same on two nodes writing to one shared ``report_dir`` (NFS, Lustre).
    ``node`` is cut to 63 characters of ``[A-Za-z0-9.-]`` (a host name's), others as ``_``."""
    stamp = _dt.datetime.fromtimestamp(wall, _dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "Z"
    node = re.sub(r"[^A-Za-z0-9.-]", "_", node)[:63].lstrip(".")
    return f"{stamp}-{node}-{pid}" if node else f"{stamp}-{pid}"


def _metrics(p: ProcessSample) -> dict:
    """The per-sample metrics of one process (bytes, seconds, counts)."""
    return {
        "state": p.state,
        "wchan": p.wchan,
        "cpu_s": round(p.cpu_s, 3),
        "rss_bytes": p.rss_bytes,
        "uss_bytes": p.uss_bytes,
        "pss_bytes": p.pss_bytes,
        "num_fds": p.num_fds,
        "rlimit_nofile_soft": p.rlimit_nofile_soft,
        "num_threads": p.num_threads,
        "read_chars": p.read_chars,
        "write_chars": p.write_chars,
        "pinned_bytes": p.pinned_bytes,
    }


def _thread_proc(t: ThreadSample) -> dict:
    """One thread's ``/proc`` facts at the examination, for ``threads_proc`` (the schema's
    ``thread_proc``): ``syscall`` is the first field of its ``syscall`` line (the call's
    number, ``running``; ``None`` unread)."""
    raw = t.wait.raw if t.wait is not None else None
    return {
        "tid": t.tid,
        "name": t.name,
        "state": t.state,
        "wchan": t.wchan,
        "syscall": raw.split()[0] if raw and raw.strip() else None,
        "wait": asdict(t.wait) if t.wait is not None else None,
        "start_ticks": t.start_ticks,
        "voluntary_ctxt_switches": t.voluntary_ctxt_switches,
    }


def _process_entry(p: ProcessSample, stack: Optional[ProcessStack], role: str, role_source: str, details) -> dict:
    entry = {
        "pid": p.pid,
        "ppid": p.ppid,
        "role": role,
        "role_source": role_source,
        "name": p.name,
        "cmdline": redact.cmdline(p.cmdline),
        "start_method": p.start_method,
        **_metrics(p),
        "threads_proc": [_thread_proc(d) for d in details],
        "stack": None,
    }
    if stack is not None:
        # The raw stack layer keeps py-spy's own key names (``py-spy dump --json``).
        entry["stack"] = {
            "native": stack.native,
            "error": None if stack.error is None else str(stack.error),
            "lost": None if stack.lost is None else str(stack.lost),
            "elapsed_s": round(stack.elapsed_s, 3),
            "threads": [
                {
                    "os_thread_id": t.tid,
                    "thread_name": t.name,
                    "active": t.active,
                    "owns_gil": t.owns_gil,
                    "frames": [_stack_frame_dict(f) for f in t.frames],
                }
                for t in stack.threads
            ],
        }
    return entry


def _stack_frame_dict(f: Frame) -> dict:
    """One py-spy frame in report.json, under py-spy's key names; ``filename`` falls back to the
    shared library (``module``) for a native frame without a source file."""
    out: dict = {
        "name": f.function,
        "filename": f.file,
        "short_filename": f.short_filename,
        "module": f.module,
        "line": f.line,
        "native": f.native,
    }
    if f.locals:
        out["locals"] = dict(f.locals)
    return out


def _frame_dict(f) -> Optional[dict]:
    return None if f is None else {"function": f.function, "file": f.file, "line": f.line}


def loader_dict(v: LoaderView, now: float) -> dict:
    """One iterator of the inside view, for ``report.json`` (seconds, counts)."""
    return {
        "pid": v.pid,
        "iterator": v.iterator,
        "kind": v.kind,
        "site": _frame_dict(v.site),
        "settings": dict(v.settings),
        "pin_memory_effective": v.pin_memory_effective,
        "host_memory_stats": dict(v.host_memory) or None,
        "pin_thread_alive": v.pin_thread_alive,
        "dataset_type": v.dataset_type,
        "dataset_code": _frame_dict(v.dataset_code),
        "iterable": v.iterable,
        "workers": list(v.workers),
        "worker_exitcodes": list(v.worker_exitcodes),
        "epoch": v.epoch,
        "batches": v.batches,
        "wait_s": round(v.wait_s, 3),
        "data_wait_fraction": None if v.data_wait_fraction is None else round(v.data_wait_fraction, 4),
        "first_batch_s": None if v.first_batch_s is None else round(v.first_batch_s, 3),
        "interval_p50_s": v.interval_p50_s,
        "interval_p99_s": v.interval_p99_s,
        "intervals": v.intervals,
        "in_next_for_s": None if v.waiting_since is None else round(max(0.0, now - v.waiting_since), 2),
        "waiting_idx": v.waiting_idx if v.waiting_since is not None else None,
        "waiting_worker": v.waiting_worker if v.waiting_since is not None else None,
        "last_batch_age_s": None if v.last_batch is None else round(max(0.0, now - v.last_batch), 2),
    }


def _fork_dict(r: ForkRecord) -> dict:
    return {
        "pid": r.pid,
        "iterator": r.iterator,
        "site": _frame_dict(r.site),
        "workers": list(r.workers),
        "threads": [
            {
                "name": t.name,
                "native_id": t.native_id,
                "daemon": t.daemon,
                "forking": t.forking,
                "frames": [_frame_dict(f) for f in t.frames],
            }
            for t in r.threads
        ],
    }


def _inside(view: Optional[InsideView], now: float) -> dict:
    if view is None:
        return {"note": "no inside view", "loaders": [], "threads_at_fork": []}
    return {
        "note": view.note,
        "loaders": [loader_dict(v, now) for v in view.loaders],
        "threads_at_fork": [_fork_dict(r) for r in view.forks[-4:]],
    }


def _timeline(samples: Iterable[Sample]) -> List[dict]:
    out = []
    for s in samples:
        out.append(
            {
                "t_mono": round(s.t_mono, 3),
                "wall": utc_iso(s.wall),
                "shm_used_bytes": s.host.shm_used_bytes,
                "shm_total_bytes": s.host.shm_total_bytes,
                "mem_available_bytes": s.host.mem_available_bytes,
                # [pid, iterator, epoch, batches, wait_s, seconds inside __next__ or null]
                "loaders": [
                    [
                        v.pid,
                        v.iterator,
                        v.epoch,
                        v.batches,
                        round(v.wait_s, 3),
                        None if v.waiting_since is None else round(s.t_mono - v.waiting_since, 2),
                    ]
                    for v in s.loaders
                ],
                "processes": [
                    {
                        "pid": p.pid,
                        "role": p.role,
                        **_metrics(p),
                        "threads": [
                            [
                                t.tid,
                                t.state,
                                round(t.cpu_s, 3),
                                t.voluntary_ctxt_switches,
                                t.nonvoluntary_ctxt_switches,
                                t.io_bytes,
                            ]
                            for t in p.threads
                        ],
                    }
                    for p in s.processes
                ],
            }
        )
    return out


def _stall(facts: Facts) -> Optional[dict]:
    """The detector's side of a hang: what triggered it, how long things were quiet, the
    assessment, and the proof when there is one."""
    st = facts.stall
    if st is None:
        return None
    return {
        "trigger": st.trigger,
        "rule": st.criterion or None,
        "stall_s": round(st.stall_s, 2),
        "no_delivery_s": round(st.no_delivery_s, 2),
        "tree_quiet_s": round(st.tree_quiet_s, 2),
        "measure": st.measure,
        "polling": [
            {
                "pid": x.pid,
                "tid": x.tid,
                "location": f"{x.frame.file}:{x.frame.line}",
                "wakes": x.wakes,
                "gap_s": x.gap_s,
            }
            for x in facts.polling
        ],
        "file_locks": [
            {"opener": x.opener, "path": x.path, "holder": x.holder, "kind": x.kind, "mode": x.mode}
            for x in facts.file_locks
        ],
        "assessment": facts.assessment or None,
        "certainty": "proven" if facts.proof is not None else "suspected",
        "proof": None
        if facts.proof is None
        else {"kind": facts.proof.kind, "pids": list(facts.proof.pids), "lines": list(facts.proof.lines())},
    }


def _diag_dict(d: Diagnosis) -> dict:
    return {
        "kind": d.kind,
        "severity": d.severity,
        "certainty": d.certainty or None,
        "confidence": round(d.confidence, 2),
        "summary": d.summary,
        "evidence": list(d.evidence),
        "remedy": d.remedy,
        "remedy_apply": d.fix.as_dict() if d.fix is not None else None,
        "docs": list(d.docs),
        "location": d.location,
        "pids": list(d.pids),
    }


def roles(facts: Facts) -> Dict[int, Tuple[ProcessRole, str]]:
    """``pid -> (role, source)``: the role decided once by discovery, and a note when the stack
    disagrees (a thread running ``_worker_loop`` in a process not taken for a worker, as on
    torch < 2.5 under spawn, or none in one that was). The role itself is never changed here."""
    out: Dict[int, Tuple[ProcessRole, str]] = {}
    for p in facts.sample.processes:
        source = "discovery"
        stack = facts.stack(p.pid)
        if stack is not None and stack.ok and p.role is not ROLE_MAIN:
            runs_loop = frames.is_worker_stack(stack.threads)
            if runs_loop and p.role is not ROLE_WORKER:
                source = "discovery (its stack runs the worker loop)"
            elif not runs_loop and p.role is ROLE_WORKER:
                source = "discovery (no _worker_loop in stack)"
        out[p.pid] = (p.role, source)
    return out


def build(
    facts: Facts,
    diagnoses: Sequence[Diagnosis],
    job: dict,
    detected_wall: float,
    action: str,
    environment: Optional[Dict[str, str]],
    watchdog_info: dict,
    suffix: str = "",
    action_note: str = "",
) -> Report:
    """Assemble the report.

    Args:
        facts: what was collected.
        diagnoses: findings, most likely first (non-empty).
        job: ``pid``, ``cmdline`` (list), ``start_time`` (ISO stamp).
        detected_wall: when the hang was confirmed (``time.time()`` seconds).
        action: what the watchdog does about it (``report`` or ``terminate``).
        environment: main's redacted environment, or ``None``.
        watchdog_info: version, settings and the py-spy binary used.
        suffix: appended to the folder name (``crash``, ``warning-<kind>``), or empty.
        action_note: why the action was (or was not) taken, or empty.
    """
    job = {**job, "cmdline": redact.cmdline(job.get("cmdline") or [])}
    role_of = roles(facts)
    processes = []
    raw_files = []
    for p in facts.sample.processes:
        role, source = role_of[p.pid]
        stack = facts.stack(p.pid)
        processes.append(_process_entry(p, stack, role, source, facts.threads_of(p.pid)))
        if stack is not None:
            raw_files.append((f"py-spy-{p.pid}.{'json' if stack.ok else 'txt'}", stack.raw or f"{stack.error or ''}\n"))
    document = {
        "schema_version": SCHEMA_VERSION,
        "job": job,
        "mode": facts.mode,
        "detected_at": utc_iso(detected_wall),
        "stall_s": round(facts.stall.stall_s, 2) if facts.stall else None,
        "stall": _stall(facts),
        "verdict": (
            {
                "kind": facts.verdict.kind,
                "confirmed_by_stack": facts.verdict.confirmed_by_stack,
                "reason": facts.verdict.reason,
            }
            if facts.verdict
            else None
        ),
        "exit_code": facts.exit_code,
        "oom_kills": facts.oom_kills,
        "stderr_tail": facts.stderr_tail[-8192:] if facts.stderr_tail else None,
        "action": action,
        "action_note": action_note or None,
        "diagnoses": [_diag_dict(d) for d in diagnoses],
        "pyspy_problem": facts.pyspy_problem,
        "host": asdict(facts.sample.host),
        "processes": processes,
        "main_threads_at_fork": {str(k): v for k, v in facts.main_threads_at_fork},
        "inside_view": _inside(facts.inside, facts.sample.t_mono),
        "environment": environment,
        "watchdog": watchdog_info,
        "timeline": _timeline(facts.timeline),
    }
    # The suffix may carry a job's value (its rank): one path component of plain characters.
    suffix = re.sub(r"[^A-Za-z0-9_.-]", "_", suffix).lstrip(".")
    name = folder_name(detected_wall, job["pid"], str(job.get("node") or "")) + (f"-{suffix}" if suffix else "")
    # Every byte that leaves goes through redaction once more, by shape (watchdog.redact): the
    # collectors redacted by name what they read (environment, locals, command lines); an
    # exception message, the stderr tail or a raw py-spy dump may still hold a token.
    document = redact.document(document)
    folder = os.path.join(str((watchdog_info.get("settings") or {}).get("report_dir") or "."), name)
    text = redact.value("\n".join(printable(line) for line in text_lines(document, folder)) + "\n")
    raw = tuple((n, redact.pyspy_json(t) if n.endswith(".json") else redact.value(t)) for n, t in raw_files)
    return Report(folder_name=name, document=document, text=text, raw_files=raw)


def status_document(
    view: InsideView, pinned: Dict[int, Optional[int]], now: float, processes: Sequence[ProcessSample] = ()
) -> dict:
    """What ``dlwatch status`` shows of a running job: its processes as one sample saw them
    (main first, then its workers: role, state, CPU seconds, memory in bytes, descriptors), its
    inside view and, per process that uses CUDA, its pinned host memory in bytes."""
    return {
        "processes": [
            {
                "pid": p.pid,
                "ppid": p.ppid,
                "role": p.role,
                "name": p.name,
                "cmdline": redact.cmdline(p.cmdline),
                "start_method": p.start_method,
                **_metrics(p),
            }
            for p in processes
        ],
        "inside_view": _inside(view, now),
        "pinned_bytes": {str(pid): b for pid, b in sorted(pinned.items())},
    }


# The roles ``dlwatch dump`` dumps: what a hang report dumps in full.
DUMPED_ROLES = (ROLE_MAIN, ROLE_WORKER, ROLE_FORKSERVER)


def dump_document(sample: Sample, stacks: Dict[int, ProcessStack]) -> dict:
    """What ``dlwatch dump`` shows: each process of ``sample`` that was dumped (main, the
    workers, a forkserver: ``DUMPED_ROLES``), with its ``/proc`` figures and threads' kernel
    waits, and its py-spy stack under py-spy's key names (``stack``: ``None`` when not
    dumped). Redacted like a report: locals by name, every string by shape."""
    entries = [
        _process_entry(p, stacks.get(p.pid), str(p.role), "sampler", p.threads)
        for p in sample.processes
        if p.pid in stacks
    ]
    return redact.document({"processes": entries})
