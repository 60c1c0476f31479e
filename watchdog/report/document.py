"""Build a hang report from the facts and diagnoses: ``report.json``'s document and the text
summary (short at the top, complete below). Pure: reads records, writes nothing.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
from dataclasses import asdict
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from tabulate import tabulate

from .. import frames, redact
from ..text import one_line, printable
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

# report.json's version; its shape is watchdog/report/schema/report.schema.json. New optional keys may
# come within a version; renaming or removing a key, or changing its type, bumps it.
SCHEMA_VERSION = 2
STACKS_HEADING = "Stacks (innermost frame first):"


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


# Control characters (C0 but tab and newline, DEL, C1): text from the job (its stderr, its
# source lines, its paths) may hold a NUL (PyTorch's signal handler writes one) or a terminal
# escape sequence; report.txt stays text, safe to cat, grep or print to a terminal.
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


def status_lines(doc: dict) -> List[str]:
    """The text of :func:`status_document`."""
    lines = []
    if doc.get("processes"):
        lines += ["Processes (now):", *_process_table(doc["processes"]), ""]
    lines += [line for line in _inside_lines(doc["inside_view"]) if line]
    for pid, b in doc["pinned_bytes"].items():
        lines.append(f"  pid {pid}: pinned host memory {_mib(b)} MiB (/dev/nvidiactl mappings in smaps)")
    if not doc["pinned_bytes"]:
        lines.append("  no process of the job uses CUDA (no /dev/nvidiactl mapping): nothing is pinned")
    return lines


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


def dump_lines(doc: dict) -> List[str]:
    """The text of :func:`dump_document`: per process a header (pid, role, state, wchan), then
    each thread's frames, innermost first."""
    lines: List[str] = []
    for p in doc["processes"]:
        lines.append(f"pid {p['pid']} ({p['role']}, {p['name']}): state {p['state']}, wchan {p['wchan'] or '-'}")
        kernel = {t["tid"]: t for t in p["threads_proc"]}
        for line in _stack_lines(p, limit=60):
            lines.append(line)
            head = line.split()
            t = kernel.get(int(head[1])) if len(head) > 1 and head[0] == "thread" and head[1].isdigit() else None
            if t is not None:
                wait = (t.get("wait") or {}).get("detail") or ""
                lines.append(
                    f"        [kernel: state {t['state']}, wchan {t['wchan'] or '-'}{', ' + wait if wait else ''}]"
                )
        lines.append("")
    return [printable(line) for line in lines]


# Width of the summary printed to stderr (``short_summary``).
SHORT_WIDTH = 100


# What splits a line (str.splitlines): in a job's argument it would start a forged line of ours.
def verify_flags(doc: dict) -> List[str]:
    """The flags ``dlwatch verify`` needs for the report ``doc`` (``report.json``), so that its
    ``prove:`` line works as printed: ``--all-loaders`` when the fix changes a DataLoader and the
    report names no site where main iterated one (no inside view); ``--yes`` when the job was
    watched by ``attach`` or read its stdin from a file, pipe or socket (verify refuses those
    without it: :func:`watchdog.commands.verify._check_rerunnable`)."""
    first = (doc.get("diagnoses") or [{}])[0]
    launch = (doc.get("job") or {}).get("launch") or {}
    main_pid = (doc.get("job") or {}).get("pid")
    loaders = (doc.get("inside_view") or {}).get("loaders") or []
    sites = [v for v in loaders if v.get("pid") == main_pid and v.get("site")]
    flags = []
    if (first.get("remedy_apply") or {}).get("loader") and not sites:
        flags.append("--all-loaders")
    if launch.get("watched_by") == "attach" or launch.get("stdin") in ("file", "pipe", "socket"):
        flags.append("--yes")
    return flags


_SHORT_KEYS = ("cause:", "where:", "fix:", "action:", "stacks:", "prove:")


def short_summary(text: str, warning: bool = False) -> str:
    """What goes to stderr when a report is written: its first line and the ``cause``,
    ``where``, ``fix``, ``action`` (and ``stacks``, when py-spy could not read them, and
    ``prove``, when the fix can be applied by ``dlwatch verify``) lines, each
    wrapped to ``SHORT_WIDTH`` characters; a warning gets its first line and cause only. The
    report file holds the rest."""
    import textwrap

    lines = text.splitlines()
    keep = [lines[0]] + [
        line for line in lines[1:10] if line.strip().startswith(_SHORT_KEYS[:1] if warning else _SHORT_KEYS)
    ]
    out = []
    for line in keep:
        # the headline's continuation sits deeper than the keys: no part of it reads as a key line
        indent = " " * (len(line) - len(line.lstrip()) + (8 if line.startswith("  ") else 4))
        out += textwrap.wrap(line, SHORT_WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [line]
    return "\n".join(out) + "\n"


def summary_text(text: str) -> str:
    """The report text without its stacks section (what is printed to stderr)."""
    return text.split("\n" + STACKS_HEADING, 1)[0].rstrip("\n") + "\n"


def _mib(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


# Locals shown per frame in a text stack, and characters of each value.
LOCALS_SHOWN, LOCAL_CHARS = 8, 120


def _stack_lines(entry: dict, limit: int = 40) -> Iterable[str]:
    stack = entry["stack"]
    if stack is None:
        yield "    (not dumped)"
        return
    if stack["error"]:
        yield f"    (no stack: {stack['error']})"
        return
    if stack.get("lost"):
        yield f"    (Python frames only: {stack['lost']})"
    for t in stack["threads"]:
        yield f"    thread {t['os_thread_id']} {t['thread_name'] or ''}{' [py-spy: idle]' if not t['active'] else ''}"
        for f in t["frames"][:limit]:
            if f["native"]:
                yield f"        {f['name']} ({frames.short_path(f['filename'])})"
            else:
                yield f"        {f['name']} ({frames.short_path(f['filename'])}:{f['line']})"
            shown = list((f.get("locals") or {}).items())  # py_spy.locals / dump --locals: redacted
            for name, value in shown[:LOCALS_SHOWN]:
                text = str(value)
                yield f"            {name} = {text[:LOCAL_CHARS] + ('…' if len(text) > LOCAL_CHARS else '')}"
            if len(shown) > LOCALS_SHOWN:
                yield f"            … {len(shown) - LOCALS_SHOWN} more locals (report.json has them)"
        if len(t["frames"]) > limit:
            yield f"        … {len(t['frames']) - limit} more frames"


def _signal_note(code: int) -> str:
    """`` (killed by SIGKILL)`` for an exit code of 128 + N, as shells and ``dlwatch run`` report
    a death by signal N; empty otherwise."""
    import signal as _signal

    if 128 < code < 128 + 65:
        try:
            return f" (killed by {_signal.Signals(code - 128).name})"
        except ValueError:
            return ""
    return ""


def _ms(s: Optional[float]) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.0f} s"


_SETTINGS_SHOWN = (
    "num_workers",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "batch_size",
    "timeout",
    "multiprocessing_context",
)


def _activity_age(v: dict) -> Optional[float]:
    """Seconds since an iterator (``loader_dict``) last did anything the recorder saw: a batch
    reached main, or main entered ``__next__``; ``None`` when neither happened."""
    ages = [a for a in (v.get("in_next_for_s"), v.get("last_batch_age_s")) if isinstance(a, (int, float))]
    return min(ages) if ages else None


def current_iterators(loaders: Sequence[dict]) -> Set[Tuple[object, object]]:
    """``(pid, iterator)`` of each process's current iterator among ``loaders`` (``loader_dict``
    entries): the one that last did something (:func:`_activity_age`); a process's only
    iterator is its current one. A process iterates one DataLoader at a time: the others were
    left (an epoch ended, a validation pass finished, a loop was broken out of)."""
    best: Dict[object, Tuple[Tuple[float, int], Tuple[object, object]]] = {}
    for v in loaders:
        age = _activity_age(v)
        rank = (-(age if age is not None else float("inf")), v.get("iterator") or 0)  # newest, then latest made
        pid = v.get("pid")
        if pid not in best or rank > best[pid][0]:
            best[pid] = (rank, (pid, v.get("iterator")))
    return {ident for _, ident in best.values()}


def _inside_lines(view: Optional[dict], ended: bool = False) -> Iterable[str]:
    """The DataLoader section of the text: each iterator's settings, batches, data wait and
    what main waits for; then the threads that ran when its workers were forked. An iterator
    of a job that has ended (``ended``: an exit or crash report) or that is not its process's
    current one (:func:`current_iterators`) is said in the past: ``finished after N batches``,
    ``main waited in __next__ … when it last ran``, without a wait's length (the time since
    main entered ``__next__`` of a left iterator measures nothing it waited)."""
    if not view:
        return
    yield ""
    yield "DataLoader (inside view):"
    if view.get("note"):
        yield f"  ({view['note']})"
    current = current_iterators(view["loaders"])
    for v in view["loaders"]:
        left = (v["pid"], v["iterator"]) not in current
        past = ended or left
        site = v["site"]
        where = f"{frames.short_path(site['file'])}:{site['line']}" if site else "?"
        settings = " ".join(f"{k}={v['settings'][k]}" for k in _SETTINGS_SHOWN if k in v["settings"])
        yield (
            f"  {where} (pid {v['pid']}, iterator {v['iterator']}, {v['kind']}): {settings} dataset={v['dataset_type']}"
        )
        wait = "-" if v["data_wait_fraction"] is None else f"{v['data_wait_fraction']:.0%}"
        count = f"{v['batches']} batches (epoch {v['epoch']})"
        if past:
            count = f"finished after {count}" if left else f"{count} before the job ended"
        line = (
            f"    {count}; data wait {wait}; between batches p50 "
            f"{_ms(v['interval_p50_s'])}, p99 {_ms(v['interval_p99_s'])}; last batch {_ms(v['last_batch_age_s'])} ago"
        )
        yield line
        if v["in_next_for_s"] is not None and v["waiting_worker"] is not None and v["waiting_worker"] >= 0:
            w = v["waiting_worker"]
            pid = v["workers"][w] if w < len(v["workers"]) else None
            whom = f"for batch {v['waiting_idx']} from worker {w}" + (f" (pid {pid})" if pid else "")
            if not past:
                yield f"    main waits in __next__ {whom} for {_ms(v['in_next_for_s'])}"
            elif left:
                yield f"    main waited in __next__ {whom} when it last ran (not the current iterator)"
            else:
                yield f"    main waited in __next__ {whom} when the job ended"
        stats = v.get("host_memory_stats") or {}
        shown = [
            (k, x)
            for k, x in stats.items()
            if k.endswith(("bytes.current", "bytes.peak")) or k.startswith("num_host_alloc")
        ][:6]
        if shown:
            parts = [f"{k} {_mib(int(x))} MiB" if "bytes" in k else f"{k} {x:g}" for k, x in shown]
            alive = {True: "; pin-memory thread alive", False: "; pin-memory thread NOT alive"}.get(
                v.get("pin_thread_alive"), ""
            )
            yield f"    CUDA host allocator (torch.cuda.host_memory_stats): {', '.join(parts)}{alive}"
        if v["settings"].get("pin_memory") and v.get("pin_memory_effective") is False:
            yield (
                "    pin_memory=True does nothing here: torch sees no accelerator, so no pin-memory thread runs and "
                "nothing is pinned"
            )
        if v["worker_exitcodes"] and any(c is not None for c in v["worker_exitcodes"]):
            codes = ", ".join(f"{p}: {c}" for p, c in zip(v["workers"], v["worker_exitcodes"]))
            yield f"    worker exit codes: {codes}"
    for r in view["threads_at_fork"]:
        site = r["site"]
        where = f"{frames.short_path(site['file'])}:{site['line']}" if site else "?"
        yield (
            f"  threads of pid {r['pid']} when iterator {r['iterator']} ({where}) forked workers "
            f"{', '.join(map(str, r['workers'])) or '?'}:"
        )
        for t in r["threads"]:
            yield (
                f"    {t['name'] or '?'} (tid {t['native_id']}{', forking' if t['forking'] else ''}): "
                f"{_at(t['frames'])}"
            )


def _at(frame_dicts: List[dict]) -> str:
    """``function (file:line)`` of the innermost frame of the user's code, else of the innermost
    frame outside the standard library, else of the innermost."""
    as_frames = [Frame(f["function"], f["file"], f["line"], False) for f in frame_dicts]
    for pick in (frames.is_user, lambda f: not frames.is_stdlib(f), lambda f: True):
        for f in as_frames:
            if pick(f):
                return f"{f.function} ({frames.short_path(f.file)}:{f.line})"
    return "?"


def _process_table(processes: Sequence[dict]) -> Iterable[str]:
    """The processes of a document as a table, indented two spaces (``tabulate``)."""
    rows = [
        [
            p["pid"],
            p["role"],
            p["start_method"] or "",
            p["state"],
            p["wchan"],
            f"{p['cpu_s']:.1f}",
            _mib(p["rss_bytes"]),
            _mib(p["uss_bytes"]),
            "-" if p["num_fds"] is None else f"{p['num_fds']}/{p['rlimit_nofile_soft']}",
            p["num_threads"],
        ]
        for p in processes
    ]
    headers = ["PID", "ROLE", "START", "STATE", "WCHAN", "CPU s", "RSS MiB", "USS MiB", "FDS", "THREADS"]
    if any(p.get("pinned_bytes") is not None for p in processes):
        headers.append("PINNED MiB")  # CUDA pinned host memory, only where CUDA is in use
        for row, p in zip(rows, processes):
            row.append(_mib(p.get("pinned_bytes")))
    for line in tabulate(rows, headers=headers, tablefmt="simple").splitlines():
        yield f"  {line}"


# How sure a report is of a cause, by its confidence: a cause is never "proven" by the kernel's view,
# which proves only that the job cannot move (NOTE [ Deadlock proof ] in detect.py).
CAUSE_WORDS = ((0.9, "strongly supported"), (0.7, "likely"), (0.0, "suspected"))


def cause_certainty(confidence: float) -> str:
    """``strongly supported`` (confidence 0.9 and above), ``likely`` (0.7 and above) or
    ``suspected``: how sure the report is of a diagnosis's cause, said apart from whether the
    hang itself is proven (``stall.certainty``, ``Diagnosis.certainty``)."""
    return next(word for floor, word in CAUSE_WORDS if confidence >= floor)


def headline(doc: dict) -> str:
    """The first line of a report document's text (and the title of its HTML page): what
    happened (for a hang, whether it is proven or suspected, then the cause's kind and how sure
    the report is of it), the rank and job pid, the job's state and its command line, e.g.
    ``dlwatch: job hung — hang: proven; cause: worker_stuck (suspected, confidence 0.50) —
    rank 1 of 2 pid 2084 stalled 31 s (python train.py)``.

    Raises:
        KeyError, TypeError: a field missing or of the wrong type (a hand-edited report).
    """
    job = doc["job"]
    first = doc["diagnoses"][0]
    cmd = one_line(shlex.join(job.get("cmdline") or [])) or "?"
    if doc["stall_s"] is not None:
        state = f"stalled {doc['stall_s']:.0f} s"
    elif doc["exit_code"] is not None:
        state = f"exited with code {doc['exit_code']}" + _signal_note(doc["exit_code"])
    else:
        state = "running"
    happened = {"hang": "job hung", "crash": "job crashed", "exit": "job ended", "live": "warning"}.get(
        doc["mode"], doc["mode"]
    )
    stall = doc.get("stall") or {}
    cause = f"{first['kind']} ({cause_certainty(first['confidence'])}, confidence {first['confidence']:.2f})"
    if doc["mode"] == "hang":  # the hang's certainty (the kernel's view), then the cause's, never one for both
        happened += f" — hang: {stall.get('certainty') or 'suspected'}; cause: {cause}"
    else:
        happened += f": {first['kind']}"
    rank = job.get("rank") or {}
    who = (
        f"rank {rank.get('RANK')}"
        + (f" of {rank['WORLD_SIZE']}" if rank.get("WORLD_SIZE") else "")
        + f" pid {job['pid']}"
        if rank
        else f"job pid {job['pid']}"
    )
    return f"dlwatch: {happened} — {who} {state} ({cmd})"


def text_lines(doc: dict, folder: Optional[str] = None) -> Iterable[str]:
    """The human summary of a report document: headline, cause, fix, then everything else.
    ``folder`` is where the report is written: named in the ``prove`` line (``dlwatch verify
    FOLDER``) when its first diagnosis has a fix that can be applied to a job dlwatch knows how
    to start again."""
    job = doc["job"]
    first = doc["diagnoses"][0]
    stall = doc.get("stall") or {}
    yield headline(doc)  # it names the kind; the cause line says how sure
    yield f"  cause:  {first['summary']} ({cause_certainty(first['confidence'])}, confidence {first['confidence']:.2f})"
    if first.get("location"):
        yield f"  where:  {first['location']}"
    yield f"  fix:    {first['remedy']}"
    if first["docs"]:
        yield f"  docs:   {' '.join(first['docs'])}"
    yield f"  action: {doc['action']}" + (f" ({doc['action_note']})" if doc.get("action_note") else "")
    if doc.get("pyspy_problem"):
        yield f"  stacks: {doc['pyspy_problem']}"
    if (
        folder
        and first.get("remedy_apply")
        and doc["mode"] in ("hang", "crash")
        and (job.get("launch") or {}).get("command")
    ):
        yield "  prove:  " + " ".join(["dlwatch verify", *verify_flags(doc), folder])
    if doc["mode"] == "hang" and stall:
        yield f"  why:    {stall.get('assessment') or ''} (trigger: {stall.get('trigger')})"
        if stall.get("rule"):
            yield f"  rule:   {stall['rule']}"
    yield ""
    yield "Evidence:"
    for line in first["evidence"]:
        yield f"  - {line}"
    if stall.get("proof") and not any(line.startswith("proof:") for line in first["evidence"]):
        yield ""
        yield "Proof (the job cannot move by itself):"
        for line in stall["proof"]["lines"]:
            yield f"  - {line}"
    if len(doc["diagnoses"]) > 1:
        yield ""
        yield "Other findings:"
        for d in doc["diagnoses"][1:]:
            yield (
                f"  {d['kind']} ({d['severity']}{'; hang: ' + d['certainty'] if d.get('certainty') else ''}; cause: "
                f"{cause_certainty(d['confidence'])}, confidence {d['confidence']:.2f}): {d['summary']}"
            )
            for line in d["evidence"]:
                yield f"    - {line}"
    yield from _inside_lines(doc.get("inside_view"), ended=doc["mode"] in ("crash", "exit"))
    yield ""
    when = (
        "last sample before the job ended" if doc["mode"] in ("crash", "exit") else f"detected at {doc['detected_at']}"
    )
    yield f"Processes ({when}):"
    yield from _process_table(doc["processes"])
    host = doc["host"]
    limit = host.get("mem_limit_bytes")
    cgroup = (
        f"; the job's memory cgroup: {_mib(host.get('mem_cgroup_usage_bytes'))} of its {_mib(limit)} MiB limit used"
        if limit
        else ""
    )
    yield (
        f"  /dev/shm: {_mib(host['shm_used_bytes'])} of {_mib(host['shm_total_bytes'])} MiB used; memory available: "
        f"{_mib(host['mem_available_bytes'])} MiB{cgroup}"
    )
    forks = (doc.get("inside_view") or {}).get("threads_at_fork") or []
    if not any(p["stack"] for p in doc["processes"]) and not forks:
        return  # warnings and crash reports take no stacks
    yield ""
    yield STACKS_HEADING
    for p in doc["processes"]:
        if p["stack"] is None and forks:
            continue
        yield f"  pid {p['pid']} ({p['role']}, {p['name']}):"
        yield from _stack_lines(p)
    for r in forks:
        yield (
            f"  threads of pid {r['pid']} when iterator {r['iterator']} forked workers "
            f"{', '.join(map(str, r['workers'])) or '?'} (recorded by the job at the fork):"
        )
        for t in r["threads"]:
            yield f"    thread {t['native_id']} {t['name'] or ''}{' (forking)' if t['forking'] else ''}"
            for f in t["frames"][:40]:
                yield f"        {f['function']} ({frames.short_path(f['file'])}:{f['line']})"
