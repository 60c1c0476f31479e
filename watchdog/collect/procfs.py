"""Direct ``/proc`` reads that psutil does not offer: per-thread progress counters, wait
channels, system calls, the environment and source lines seen from the target's root.

Formats: ``proc(5)`` and ``Documentation/filesystems/proc.rst`` in the kernel tree. Every
function here returns ``None`` (or an empty tuple) for a process or thread that vanished or
cannot be read; none raises ``OSError``.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Optional, Tuple

from ..types import ThreadDetail, ThreadSample

CLK_TCK = os.sysconf("SC_CLK_TCK")
_SECRET_KEY = re.compile(r"SECRET|TOKEN|PASSW|PASSWD|CREDENTIAL|PRIVATE|AUTH|COOKIE|SESSION|API_?KEY|ACCESS_?KEY|_KEY$|^KEY", re.I)
REDACTED = "<redacted>"


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def parse_stat(text: str) -> Tuple[str, str, float]:
    """``(comm, state, cpu_s)`` from a ``stat`` line; ``cpu_s`` is utime + stime in seconds.

    The comm field may hold spaces and parentheses, so the line is split at the last ``)``.

    Raises:
        ValueError: the text is not a ``stat`` line.
    """
    lpar, rpar = text.index("("), text.rindex(")")
    comm = text[lpar + 1 : rpar]
    rest = text[rpar + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return comm, rest[0], (int(rest[11]) + int(rest[12])) / CLK_TCK


def parse_status_fields(text: str, *keys: str) -> Dict[str, int]:
    """Integer fields of a ``status`` file (e.g. ``voluntary_ctxt_switches``)."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in keys:
            out[key] = int(value.split()[0])
    return out


def _io_bytes(base: str) -> Optional[int]:
    text = _read(f"{base}/io")
    if text is None:
        return None
    fields = parse_status_fields(text, "rchar", "wchar")
    return fields.get("rchar", 0) + fields.get("wchar", 0)


def thread_samples(pid: int) -> Tuple[ThreadSample, ...]:
    """Progress counters of every thread of ``pid`` (``/proc/PID/task/*``); threads that end
    while being read are skipped. Cost: three small reads per thread."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return ()
    out = []
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        stat, status = _read(f"{base}/stat"), _read(f"{base}/status")
        if stat is None or status is None:
            continue
        try:
            comm, state, cpu_s = parse_stat(stat)
        except (ValueError, IndexError):
            continue
        ctx = parse_status_fields(status, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
        out.append(
            ThreadSample(
                tid=tid,
                name=comm,
                state=state,
                cpu_s=cpu_s,
                voluntary_ctxt_switches=ctx.get("voluntary_ctxt_switches", 0),
                nonvoluntary_ctxt_switches=ctx.get("nonvoluntary_ctxt_switches", 0),
                io_bytes=_io_bytes(base),
            )
        )
    return tuple(out)


def wchan(pid: int, tid: Optional[int] = None) -> Optional[str]:
    """The kernel function the task sleeps in (``/proc/PID[/task/TID]/wchan``); ``"0"`` when
    running or when the kernel hides it (no permission)."""
    path = f"/proc/{pid}/wchan" if tid is None else f"/proc/{pid}/task/{tid}/wchan"
    text = _read(path)
    return text.strip() if text is not None else None


def syscall(pid: int, tid: int) -> Optional[str]:
    """First field of ``/proc/PID/task/TID/syscall``: the system call number the thread is
    blocked in, ``running``, or ``None`` when unreadable (needs ptrace-read access)."""
    text = _read(f"/proc/{pid}/task/{tid}/syscall")
    if not text:
        return None
    return text.split()[0]


def thread_details(pid: int) -> Tuple[ThreadDetail, ...]:
    """State, name, wait channel and system call of every thread of ``pid`` (report time)."""
    out = []
    for t in thread_samples(pid):
        out.append(ThreadDetail(tid=t.tid, name=t.name, state=t.state, wchan=wchan(pid, t.tid), syscall=syscall(pid, t.tid)))
    return tuple(out)


_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^/\s:@]*:)[^@\s/]+(?=@)")


def redact_env(env: Dict[str, str]) -> Dict[str, str]:
    """``env`` with the values of secret-looking keys (TOKEN, SECRET, PASSWORD, …) replaced,
    and passwords inside URLs (``postgres://user:PASSWORD@host``) replaced in every value."""
    out = {}
    for k, v in env.items():
        out[k] = REDACTED if _SECRET_KEY.search(k) else _URL_CREDENTIALS.sub(lambda m: m.group("head") + REDACTED, v)
    return out


def environ(pid: int) -> Optional[Dict[str, str]]:
    """The redacted environment of ``pid`` (``/proc/PID/environ``), or ``None``."""
    text = _read(f"/proc/{pid}/environ")
    if text is None:
        return None
    env = {}
    for item in text.split("\0"):
        if "=" in item:
            k, v = item.split("=", 1)
            env[k] = v
    return redact_env(env)


def source_lines(pid: int, wanted) -> Dict[Tuple[str, int], str]:
    """The stripped source text of each ``(file, line)`` in ``wanted``, as the target sees the
    file (through ``/proc/PID/root``, so paths inside a container resolve). Each file is read
    once; unreadable ones are left out."""
    by_file: Dict[str, set] = {}
    for file, line in wanted:
        if line > 0 and file.startswith("/"):
            by_file.setdefault(file, set()).add(line)
    out: Dict[Tuple[str, int], str] = {}
    for file, lines in by_file.items():
        for path in (f"/proc/{pid}/root{file}", file):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    for i, text in enumerate(f, 1):
                        if i in lines:
                            out[(file, i)] = text.strip()
                        if i >= max(lines):
                            break
                break
            except OSError:
                continue
    return out


def open_files(pid: int, limit: int = 256) -> Tuple[str, ...]:
    """Targets of ``pid``'s file descriptors (``/proc/PID/fd/N`` links: paths, ``pipe:[…]``,
    ``socket:[…]``), at most ``limit``; empty when unreadable."""
    try:
        fds = sorted(os.listdir(f"/proc/{pid}/fd"), key=int)[:limit]
    except (OSError, ValueError):
        return ()
    out = []
    for fd in fds:
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return tuple(out)
