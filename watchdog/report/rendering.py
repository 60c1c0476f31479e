"""The text of report documents (:mod:`watchdog.report.document`): ``report.txt`` (short at
the top, complete below), the short summary printed to stderr, and the text of ``dlwatch
status`` and ``dlwatch dump``. Reads the documents (dicts) only, never the records they were
built from. Pure: writes nothing.
"""

from __future__ import annotations

import shlex
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from tabulate import tabulate

from .. import frames
from ..text import one_line, printable
from ..types import THROUGHPUT_FIX_KINDS, Frame

STACKS_HEADING = "Stacks (innermost frame first):"


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


def dump_lines(doc: dict) -> List[str]:
    """The text of :func:`dump_document`: per process a header (pid, role, state, wchan), then
    each thread's frames, innermost first."""
    lines: List[str] = []
    for p in doc["processes"]:
        lines.append(
            f"pid {p['pid']} ({p['role']}, {one_line(p['name'])}): state {p['state']}, wchan {p['wchan'] or '-'}"
        )
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


def verify_flags(doc: dict) -> List[str]:
    """The flags ``dlwatch verify`` needs for the report ``doc`` (``report.json``), so that its
    ``prove:`` line works as printed: ``--all-loaders`` when the fix changes a DataLoader and the
    report names no site where main iterated one (no inside view); ``--yes`` when the job was
    watched by ``attach`` or read its stdin from a file, pipe or socket (verify refuses those
    without it: :func:`watchdog.commands.verify_trust.check_rerunnable`)."""
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
# A warning's short summary: what it found, where and what to change (the job runs on: no
# action, no stacks).
_WARNING_KEYS = ("cause:", "where:", "fix:", "prove:")


def short_summary(text: str, warning: bool = False) -> str:
    """What goes to stderr when a report is written: its first line and the ``cause``,
    ``where``, ``fix``, ``action`` (and ``stacks``, when py-spy could not read them, and
    ``prove``, when the fix can be applied by ``dlwatch verify``) lines, each
    wrapped to ``SHORT_WIDTH`` characters; a warning gets its first line, ``cause``, ``where``,
    ``fix`` and ``prove`` (stderr is what an engineer reads first). The report file holds the
    rest."""
    import textwrap

    lines = text.splitlines()
    keep = [lines[0]] + [
        line for line in lines[1:10] if line.strip().startswith(_WARNING_KEYS if warning else _SHORT_KEYS)
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
        name = one_line(t["thread_name"] or "")  # the job names its threads: never a line break
        yield f"    thread {t['os_thread_id']} {name}{' [py-spy: idle]' if not t['active'] else ''}"
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


def _data_wait(v: dict) -> str:
    """An iterator's data wait as the loader section says it: over its own life, creation to
    its last batch (``LoaderView.data_wait_fraction``), with its seconds, so that it is not
    read as the input-bound verdict's share of its window."""
    fraction, wait = v["data_wait_fraction"], v["wait_s"]
    if fraction is None:
        return "-"
    if fraction <= 0 or not isinstance(wait, (int, float)):
        return f"{fraction:.0%} of the time from its creation to its last batch"
    return f"{fraction:.0%} of the time from its creation to its last batch ({wait:.1f} of {wait / fraction:.1f} s)"


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
        wait = _data_wait(v)
        count = f"{v['batches']} batch{'' if v['batches'] == 1 else 'es'} (epoch {v['epoch']})"
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
                f"    {one_line(t['name'] or '?')} (tid {t['native_id']}{', forking' if t['forking'] else ''}): "
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
# which proves only that the job cannot move (NOTE [ Deadlock proof ] in detect/proof.py).
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
    # A diagnosis's text is one line each (the engine escapes what the job named in it); a report
    # written by an older dlwatch may hold a raw line break there: escaped here too (one_line).
    sure = f"{cause_certainty(first['confidence'])}, confidence {first['confidence']:.2f}"
    yield f"  cause:  {one_line(first['summary'])} ({sure})"
    if first.get("location"):
        yield f"  where:  {one_line(first['location'])}"
    yield f"  fix:    {one_line(first['remedy'])}"
    if first["docs"]:
        yield f"  docs:   {' '.join(first['docs'])}"
    yield f"  action: {doc['action']}" + (f" ({doc['action_note']})" if doc.get("action_note") else "")
    if doc.get("pyspy_problem"):
        yield f"  stacks: {doc['pyspy_problem']}"
    if (
        folder
        and first.get("remedy_apply")
        and (doc["mode"] in ("hang", "crash") or (doc["mode"] == "live" and first["kind"] in THROUGHPUT_FIX_KINDS))
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
        yield f"  - {one_line(line)}"
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
                f"{cause_certainty(d['confidence'])}, confidence {d['confidence']:.2f}): {one_line(d['summary'])}"
            )
            for line in d["evidence"]:
                yield f"    - {one_line(line)}"
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
        yield f"  pid {p['pid']} ({p['role']}, {one_line(p['name'])}):"
        yield from _stack_lines(p)
    for r in forks:
        yield (
            f"  threads of pid {r['pid']} when iterator {r['iterator']} forked workers "
            f"{', '.join(map(str, r['workers'])) or '?'} (recorded by the job at the fork):"
        )
        for t in r["threads"]:
            yield f"    thread {t['native_id']} {one_line(t['name'] or '')}{' (forking)' if t['forking'] else ''}"
            for f in t["frames"][:40]:
                yield f"        {f['function']} ({frames.short_path(f['file'])}:{f['line']})"
