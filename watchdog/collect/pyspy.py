"""Stacks from py-spy (https://github.com/benfred/py-spy), one process per call, in parallel,
all within one deadline.

Facts designed around (measured on the development machine: py-spy 0.4.3, Linux 6.18, 2
CPUs shared with other work, issue #10): a Python-only dump takes 10–25 ms and ~10 ms of CPU;
``--native`` takes ~0.1 s of CPU per process of a PyTorch job (py-spy loads the symbols of
every mapped library, libtorch included, holding ~107 MiB meanwhile), so native dumps are
CPU-bound: 1+32 processes need ~3.5 CPU-seconds whatever the concurrency. Run all at once,
they share the CPUs and all finish together at the end (1.8 s for 1+32 at a load of 5), which
under a deadline is all or nothing: with a 1.5 s deadline all at once got 0 of 33 native
stacks, 16 at a time 16, 4 at a time 18–20 (and the old per-process 5 s timeout with 16 at a
time lost a whole round of 16 when the machine was busy, then spent a second timeout on
fallbacks: issue #10's 9.7 s and 12 silent losses). So every process first gets a Python-only
dump, then native dumps run :func:`native_workers` at a time (4 at a time: 2.4 s for all 33
at that load), and whatever the deadline leaves out keeps its Python stack and says why
(``ProcessStack.lost``).

``py-spy dump --json --subprocesses`` returns only the parent and aborts at the first
non-Python child, so each PID is dumped on its own; ``--native`` is rejected together with
``--nonblocking`` (``py-spy dump --help``); py-spy exits 1 on any runtime error and prints a
long backtrace unless ``RUST_BACKTRACE`` is unset; without ptrace permission it says "Failed to
get process executable name" or "Permission denied"; native unwinding can fail on its own
("Failed to merge native and python frames", py-spy issues #634, #673). py-spy calls a thread
blocked on a lock "idle" (``active: false``). It pauses the target with ``PTRACE_ATTACH``
(remoteprocess ``ThreadLock``), so a py-spy killed at the deadline is killed with its whole
process group and reaped, and a target it left stopped is continued.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterable, List, Optional, Tuple

from .. import children, redact
from ..errors import PTRACE_REMEDY
from ..types import Frame, ProcessStack, StackFailure, ThreadStack
from ..types import StackFailureKind as Kind
from .procfs import proc_stat

_PERMISSION_MARKERS = ("permission denied", "operation not permitted", "failed to get process executable name", "eperm")

REAP_S = 1.0
"""Seconds allowed to collect a killed py-spy's output and exit status after its process group
got SIGKILL (dead processes close their pipes at once; this bounds a descendant that left the
group while holding them)."""


def find_pyspy(configured: Optional[str] = None) -> Optional[str]:
    """Path of the py-spy binary: ``configured`` when given, else the one beside this
    interpreter (the virtual environment dlwatch was installed in), else ``$PATH``'s.
    ``None`` when there is none."""
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else ``os.cpu_count()``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def native_workers(n: int) -> int:
    """How many ``py-spy --native`` run at once for ``n`` processes: two per usable CPU.

    Native dumps are CPU-bound (~0.1 s of CPU and ~107 MiB each for a PyTorch process, see the
    module docstring): more at once finishes all of them only a little sooner on a busy
    machine (a bigger share of its CPUs) but delays every result to the end and multiplies the
    memory. Two per CPU keeps the CPUs busy while a dump waits on ptrace and leaves a slot
    when one py-spy hangs until the deadline."""
    return max(1, min(n, 2 * usable_cpus()))


def python_workers(n: int) -> int:
    """How many Python-only dumps run at once for ``n`` processes: all of them, up to
    ``max(16, 4 × usable CPUs)`` (each takes ~10 ms of CPU; most of its time is waiting)."""
    return max(1, min(n, max(16, 4 * usable_cpus())))


def parse_dump(text: str, locals_: bool = False) -> Tuple[ThreadStack, ...]:
    """Threads from ``py-spy dump --json`` output, main thread first, innermost frame first.

    A frame is native when py-spy gives it a ``module`` (the shared library). Raises:
        ValueError: ``text`` is not py-spy's JSON thread list.
    """
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("py-spy JSON is not a list of threads")
    threads = []
    for t in data:
        frames = []
        for f in t.get("frames", []):
            native = f.get("module") is not None
            loc = None
            if locals_ and f.get("locals"):
                loc = tuple(
                    (str(v.get("name")), redact.local(str(v.get("name")), str(v.get("repr")))) for v in f["locals"]
                )
            frames.append(
                Frame(
                    function=str(f.get("name", "?")),
                    file=str(f.get("filename") or f.get("module") or "?"),
                    line=int(f.get("line") or 0),
                    native=native,
                    module=f.get("module"),
                    locals=loc,
                    short_filename=f.get("short_filename") or None,
                )
            )
        threads.append(
            ThreadStack(
                tid=int(t.get("os_thread_id") or 0),
                name=str(t.get("thread_name") or ""),
                active=bool(t.get("active")),
                owns_gil=bool(t.get("owns_gil")),
                frames=tuple(frames),
            )
        )
    pid_order = sorted(threads, key=lambda th: (th.name != "MainThread", th.tid))
    return tuple(pid_order)


def explain_failure(stderr: str, pid: int, native: bool = False) -> StackFailure:
    """Why a dump failed, from py-spy's output: ptrace refused (with the remedy), the process
    gone, or for a ``--native`` dump "native unwinding failed" (py-spy prints e.g. "Failed to
    merge native and python frames")."""
    text = " ".join(stderr.split())
    if any(m in text.lower() for m in _PERMISSION_MARKERS):
        return StackFailure(
            Kind.PTRACE_REFUSED,
            f"py-spy cannot attach to pid {pid} (ptrace denied: {text[:200]}); {PTRACE_REMEDY}",
        )
    if "no such process" in text.lower():
        return StackFailure(Kind.GONE, f"pid {pid} ended before py-spy could read it")
    if native:
        return StackFailure(
            Kind.UNWIND_FAILED,
            f"py-spy --native failed on pid {pid} (native unwinding failed): {text[:300] or 'no output'}",
        )
    return StackFailure(Kind.FAILED, f"py-spy failed on pid {pid}: {text[:300] or 'no output'}")


def _state(pid: int) -> Optional[str]:
    """The state letter of ``/proc/PID/stat`` (proc(5)), ``None`` when it cannot be read."""
    st = proc_stat(pid)
    return None if st is None else st.state


def _continue_if_left_stopped(pid: int) -> str:
    """After a py-spy was killed while it may have had ``pid`` ptrace-stopped: when ``pid`` is
    now stopped (state ``T``/``t``), send it SIGCONT. A tracer's death detaches its tracees
    (ptrace(2)) but one caught in the SIGSTOP of ``PTRACE_ATTACH`` can stay stopped. Returns a
    note for the error text, empty when nothing was done."""
    for _ in range(3):
        if _state(pid) in ("T", "t"):
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                return ""
            return f"; pid {pid} was left stopped: SIGCONT sent"
        time.sleep(0.01)
    return ""


def _run(cmd: List[str], deadline: float) -> Optional[Tuple[int, str, str]]:
    """Run ``cmd`` in a new session until it exits or ``deadline`` (``time.monotonic()``
    seconds) passes; ``(exit code, stdout, stderr)``, or ``None`` when the deadline came first:
    then its whole process group was killed and it was reaped. Raises OSError when ``cmd``
    cannot be started."""
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        children.kill_group(proc, REAP_S)  # its whole group, then reaped
        return None
    except BaseException:
        children.kill_group(proc, REAP_S)  # its whole group, then reaped
        raise
    return proc.returncode, out, err


def dump(
    pid: int,
    pyspy: Optional[str],
    native: bool,
    timeout_s: float,
    locals_: bool = False,
    nonblocking: bool = False,
    deadline: Optional[float] = None,
) -> ProcessStack:
    """One ``py-spy dump --json`` of ``pid``, over by ``deadline`` (``time.monotonic()``
    seconds), or within ``timeout_s`` seconds from now when no deadline is given.

    On the deadline py-spy's whole process group is killed (SIGKILL) and reaped, and a target
    that was running before and is stopped after gets SIGCONT (a blocking dump pauses it with
    ``PTRACE_ATTACH``). Never raises for the target's sake: a missing binary, a
    deadline already passed (py-spy is not started), a timeout, a refused attach or unparseable
    output come back as a :class:`ProcessStack` whose ``error`` says why (a
    :class:`~watchdog.types.StackFailure`: its kind and a sentence).
    """
    started = time.monotonic()
    if deadline is None:
        deadline = started + timeout_s
    flags = " --native" if native else " --nonblocking" if nonblocking else ""
    if pyspy is None:
        return ProcessStack(
            pid,
            (),
            native,
            StackFailure(Kind.NO_PYSPY, "py-spy is not installed (pip install py-spy)"),
            "",
            0.0,
        )
    if deadline <= started:
        return ProcessStack(
            pid,
            (),
            native,
            StackFailure(Kind.NOT_RUN, f"py-spy{flags} not run on pid {pid}: the dump deadline had passed"),
            "",
            0.0,
        )
    cmd = [pyspy, "dump", "--json", "--pid", str(pid)]
    if native:
        cmd.append("--native")
    elif nonblocking:
        cmd.append("--nonblocking")
    if locals_:
        cmd.append("--locals")
    was_stopped = nonblocking or _state(pid) in ("T", "t")
    try:
        done = _run(cmd, deadline)
    except OSError as e:
        why = StackFailure(Kind.NO_PYSPY, f"cannot run {pyspy}: {e.strerror}")
        return ProcessStack(pid, (), native, why, "", time.monotonic() - started)
    elapsed = time.monotonic() - started
    if done is None:
        note = "" if was_stopped else _continue_if_left_stopped(pid)
        timed_out = StackFailure(
            Kind.TIMED_OUT,
            f"py-spy{flags} timed out on pid {pid} after {elapsed:.1f} s (the dump deadline; py-spy was killed with "
            f"its process group, the target left running{note})",
        )
        return ProcessStack(pid, (), native, timed_out, "", time.monotonic() - started)
    code, out, err = done
    if code != 0:
        return ProcessStack(pid, (), native, explain_failure(err or out, pid, native), err, elapsed)
    try:
        threads = parse_dump(out, locals_)
    except ValueError as e:
        return ProcessStack(
            pid,
            (),
            native,
            StackFailure(Kind.FAILED, f"unreadable py-spy output for pid {pid}: {e}"),
            out,
            elapsed,
        )
    return ProcessStack(pid, threads, native, None, out, elapsed)


_FINAL = (
    Kind.TIMED_OUT,
    Kind.NOT_RUN,
    Kind.PTRACE_REFUSED,
    Kind.GONE,
    Kind.NO_PYSPY,
)
"""Reasons after which a second py-spy on the same pid would fail the same way."""


def _merge(
    base: ProcessStack, more: Optional[ProcessStack], native: bool, locals_: bool, disk_sleep: bool
) -> ProcessStack:
    """The stack of one pid from its Python-only dump ``base`` and the dump with native
    frames and/or locals ``more`` (``None``: not attempted)."""
    if more is not None and more.ok:
        return more
    what = "native frames" if native else "locals"
    if base.ok:
        if disk_sleep and native:
            why = StackFailure(
                Kind.DISK_SLEEP,
                f"pid {base.pid} is in uninterruptible sleep (D state): read with --nonblocking, which py-spy cannot "
                "combine with --native",
                what,
            )
        elif more is None:
            return base
        else:
            failed = more.error or StackFailure(Kind.FAILED, "?")
            why = dataclasses.replace(failed, what=what)
        return ProcessStack(base.pid, base.threads, False, None, base.raw, base.elapsed_s, why)
    if more is not None and more.error and base.error and more.error.kind != base.error.kind:
        return ProcessStack(
            base.pid,
            (),
            False,
            StackFailure(base.error.kind, f"{base.error.detail}; then {more.error.detail}"),
            base.raw or more.raw,
            base.elapsed_s + more.elapsed_s,
        )
    return base


def dump_all(
    pids: Iterable[int],
    pyspy: Optional[str],
    native: bool,
    timeout_s: float,
    locals_: bool = False,
    disk_sleep: Iterable[int] = (),
    deadline: Optional[float] = None,
    python_stacks: Optional[Dict[int, ProcessStack]] = None,
) -> Dict[int, ProcessStack]:
    """Dump every pid, all of it over by ``deadline`` (``time.monotonic()`` seconds; default:
    ``timeout_s`` seconds from now) plus at most :data:`REAP_S` to reap a killed py-spy.

    Every pid first gets a Python-only dump (``--nonblocking`` for the pids in ``disk_sleep``,
    in D state, which ptrace cannot stop), up to :func:`python_workers` at a time, unless
    ``python_stacks`` already holds one for it (a result of an earlier call). Then, when
    ``native`` or ``locals_`` is asked, a second dump with ``--native``/``--locals`` runs for
    every pid whose first dump did not fail in a way a second would repeat, up to
    :func:`native_workers` at a time and in the order of ``pids``; each success replaces the
    Python-only stack. The native attempt and its Python-only fallback thus share the one
    deadline. Returns a :class:`ProcessStack` for every pid: ``error`` set when it has no
    stack, ``lost`` set when it has only Python frames though native frames (or locals) were
    asked, both saying why (``StackFailure``); :func:`problem_summary` sums them up. Never
    raises for a target's sake (see :func:`dump`).
    """
    start = time.monotonic()
    if deadline is None:
        deadline = start + timeout_s
    pids = list(dict.fromkeys(pids))
    if not pids:
        return {}
    d_state = set(disk_sleep)
    more_wanted = native or locals_
    have = {pid: st for pid, st in (python_stacks or {}).items() if pid in pids}
    missing = [pid for pid in pids if pid not in have]
    base: Dict[int, ProcessStack] = dict(have)
    more: Dict[int, ProcessStack] = {}
    order = {pid: i for i, pid in enumerate(pids)}
    ready: List[Tuple[int, int]] = []  # heap of (position in pids, pid) whose second dump may start
    pending = [len(missing)]  # Python-only dumps not finished yet
    cond = threading.Condition()

    def eligible(pid: int) -> bool:
        st = base[pid]
        if pid in d_state and native:
            return False
        return st.error is None or st.error.kind not in _FINAL

    def first(pid: int) -> None:
        st = ProcessStack(
            pid,
            (),
            False,
            StackFailure(Kind.FAILED, f"py-spy failed on pid {pid}: internal error"),
            "",
            0.0,
        )
        try:
            st = dump(pid, pyspy, False, timeout_s, False, nonblocking=pid in d_state, deadline=deadline)
        finally:
            with cond:
                base[pid] = st
                if more_wanted and eligible(pid):
                    heapq.heappush(ready, (order[pid], pid))
                pending[0] -= 1
                cond.notify_all()

    def seconds() -> None:
        # Takes the earliest ready pid in the order of ``pids`` (main first) until none is left.
        while True:
            with cond:
                while not ready and pending[0] > 0:
                    cond.wait(0.1)
                if not ready:
                    return
                _, pid = heapq.heappop(ready)
            st = dump(pid, pyspy, native, timeout_s, locals_, nonblocking=pid in d_state, deadline=deadline)
            with cond:
                more[pid] = st

    if more_wanted:
        for pid in have:
            if eligible(pid):
                heapq.heappush(ready, (order[pid], pid))
    with ThreadPoolExecutor(
        max_workers=python_workers(len(missing)) + (native_workers(len(pids)) if more_wanted else 0)
    ) as pool:
        waits = [pool.submit(seconds) for _ in range(native_workers(len(pids)) if more_wanted else 0)]
        waits += [pool.submit(first, pid) for pid in missing]
        for w in waits:
            w.result()
    return {pid: _merge(base[pid], more.get(pid), native, locals_, pid in d_state) for pid in pids}


def dump_with_fallback(
    pid: int, pyspy: Optional[str], native: bool, timeout_s: float, locals_: bool, disk_sleep: bool
) -> ProcessStack:
    """One pid's stack within ``timeout_s`` seconds in all: :func:`dump_all` of ``[pid]``
    (Python-only first, then native frames when asked, sharing the one deadline; a process in D
    state is read ``--nonblocking`` only)."""
    return dump_all([pid], pyspy, native, timeout_s, locals_, [pid] if disk_sleep else ())[pid]


def problem_summary(stacks: Dict[int, ProcessStack], budget_s: Optional[float] = None) -> Optional[str]:
    """One line on what the dumps lost, for the report's ``pyspy_problem``: which pids have
    no stack and which lost native frames (or locals), grouped by ``StackFailure.kind``; a group
    whose pids alone do not say enough (ptrace refused, native unwinding failed, py-spy
    failed) also shows its first error (with the ptrace remedy when permission is the cause).
    ``budget_s`` (seconds, ``py_spy.timeout_s``) is named when the deadline cost something.
    ``None`` when nothing was lost."""
    n = len(stacks)
    parts = []
    late = False
    failures: Tuple[Tuple[str, Dict[int, StackFailure]], ...] = (
        ("no stack", {pid: st.error for pid, st in stacks.items() if st.error is not None}),
        ("only Python frames", {pid: st.lost for pid, st in stacks.items() if st.ok and st.lost is not None}),
    )
    for label, texts in failures:
        if not texts:
            continue
        groups: Dict[Kind, List[int]] = {}
        for pid in sorted(texts):
            groups.setdefault(texts[pid].kind, []).append(pid)
        lost_what = ""
        if label != "no stack":
            kinds = {t.what for t in texts.values()}
            lost_what = f" ({' and '.join(sorted(kinds))} lost)"
        details = []
        for kind, group in groups.items():
            shown = ", ".join(map(str, group[:12])) + (f", … ({len(group)} in all)" if len(group) > 12 else "")
            if kind in (
                Kind.TIMED_OUT,
                Kind.NOT_RUN,
                Kind.GONE,
                Kind.DISK_SLEEP,
            ):
                late = late or kind in (Kind.TIMED_OUT, Kind.NOT_RUN)
                details.append(f"{kind.value}: pid {shown}")
            else:
                details.append(f"{kind.value}: pid {shown} — {texts[group[0]].detail}")
        parts.append(f"{label} for {len(texts)} of {n} processes{lost_what}: " + "; ".join(details))
    if late and budget_s:
        parts.append(f"The dump deadline is py_spy.timeout_s = {budget_s:g} s after detection")
    return ". ".join(parts) or None
