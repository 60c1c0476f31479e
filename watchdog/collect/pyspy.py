"""Stacks from py-spy (https://github.com/benfred/py-spy), one process per call, in parallel.

Facts designed around (measured on the development machine: py-spy 0.4.3, Linux 6.18):
a Python-only dump takes 10–25 ms, ``--native`` 100–600 ms; ``dump --json --subprocesses``
returns only the parent and aborts at the first non-Python child, so each PID is dumped on
its own with its own timeout; ``--native`` is rejected together with ``--nonblocking``;
py-spy exits 1 on any runtime error and prints a long backtrace unless ``RUST_BACKTRACE`` is
unset; without ptrace permission it says "Failed to get process executable name" or
"Permission denied". py-spy calls a thread blocked on a lock "idle" (``active: false``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterable, Optional, Tuple

from ..errors import PTRACE_REMEDY
from ..types import Frame, ProcessStack, ThreadStack
from .procfs import redact_local

_PERMISSION_MARKERS = ("permission denied", "operation not permitted", "failed to get process executable name", "eperm")


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
                loc = tuple((str(v.get("name")), redact_local(str(v.get("name")), str(v.get("repr")))) for v in f["locals"])
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


def explain_failure(stderr: str, pid: int) -> str:
    """A one-line reason for a failed dump, with the ptrace remedy when permission is the
    cause."""
    text = " ".join(stderr.split())
    if any(m in text.lower() for m in _PERMISSION_MARKERS):
        return f"py-spy cannot attach to pid {pid} (ptrace denied: {text[:200]}); {PTRACE_REMEDY}"
    if "No such process" in text or "no such process" in text.lower():
        return f"pid {pid} ended before py-spy could read it"
    return f"py-spy failed on pid {pid}: {text[:300] or 'no output'}"


def dump(
    pid: int,
    pyspy: Optional[str],
    native: bool,
    timeout_s: float,
    locals_: bool = False,
    nonblocking: bool = False,
) -> ProcessStack:
    """One ``py-spy dump --json`` of ``pid`` within ``timeout_s`` seconds.

    Never raises for the target's sake: a missing binary, a timeout, a refused attach or
    unparseable output come back as a :class:`ProcessStack` whose ``error`` says why.
    """
    started = time.monotonic()
    if pyspy is None:
        return ProcessStack(pid, (), native, "py-spy is not installed (pip install py-spy)", "", 0.0)
    cmd = [pyspy, "dump", "--json", "--pid", str(pid)]
    if native:
        cmd.append("--native")
    elif nonblocking:
        cmd.append("--nonblocking")
    if locals_:
        cmd.append("--locals")
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ProcessStack(pid, (), native, f"py-spy timed out after {timeout_s:g} s on pid {pid}", "", time.monotonic() - started)
    except OSError as e:
        return ProcessStack(pid, (), native, f"cannot run {pyspy}: {e.strerror}", "", time.monotonic() - started)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        return ProcessStack(pid, (), native, explain_failure(done.stderr or done.stdout, pid), done.stderr, elapsed)
    try:
        threads = parse_dump(done.stdout, locals_)
    except ValueError as e:
        return ProcessStack(pid, (), native, f"unreadable py-spy output for pid {pid}: {e}", done.stdout, elapsed)
    return ProcessStack(pid, threads, native, None, done.stdout, elapsed)


def dump_with_fallback(pid: int, pyspy: Optional[str], native: bool, timeout_s: float, locals_: bool, disk_sleep: bool) -> ProcessStack:
    """:func:`dump` with native frames when asked, falling back to Python-only frames when
    native unwinding fails. A process in D state is read ``--nonblocking`` (ptrace cannot stop
    it), which excludes native frames."""
    if disk_sleep:
        return dump(pid, pyspy, False, timeout_s, locals_, nonblocking=True)
    first = dump(pid, pyspy, native, timeout_s, locals_)
    if first.ok or not native or pyspy is None or "ptrace denied" in (first.error or ""):
        return first
    return dump(pid, pyspy, False, timeout_s, locals_)


def dump_all(
    pids: Iterable[int],
    pyspy: Optional[str],
    native: bool,
    timeout_s: float,
    locals_: bool = False,
    disk_sleep: Iterable[int] = (),
) -> Dict[int, ProcessStack]:
    """Dump every pid concurrently (one py-spy per pid, each with its own timeout); returns
    a result for every pid. Wall time is about the slowest single dump."""
    pids = list(dict.fromkeys(pids))
    d_state = set(disk_sleep)
    if not pids:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(pids))) as pool:
        futures = {pid: pool.submit(dump_with_fallback, pid, pyspy, native, timeout_s, locals_, pid in d_state) for pid in pids}
        return {pid: f.result() for pid, f in futures.items()}
