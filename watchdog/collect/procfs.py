"""Direct ``/proc`` reads that psutil does not offer: per-thread progress counters, wait
channels, system calls, the environment and source lines seen from the target's root.

Formats: ``proc(5)`` and ``Documentation/filesystems/proc.rst`` in the kernel tree. Every
function here returns ``None`` (or an empty tuple) for a process or thread that vanished or
cannot be read; none raises ``OSError``.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from ..types import ThreadDetail, ThreadSample
from . import waits

CLK_TCK = os.sysconf("SC_CLK_TCK")
_SECRET_KEY = re.compile(
    r"SECRET|TOKEN|PASSW|PASSWD|PASS$|^PASS|_PWD$|CREDENTIAL|CREDS|PRIVATE|AUTH|COOKIE|SESSION|API_?KEY|ACCESS_?KEY|_KEY$|^KEY"
    r"|_PAT$|JWT|SALT|WEBHOOK|DSN$|CONNECTION_?STRING|SIGNATURE",
    re.I,
)
# Values that carry a secret whatever their key is called (Azure connection strings, signed URLs).
_SECRET_VALUE = re.compile(r"(AccountKey|SharedAccessKey|SharedAccessSignature|sig|password|pwd)=([^;&\s]+)", re.I)
# An HTTP credential inside any value: "Authorization: Bearer X", "Basic X", "token X".
_AUTH_VALUE = re.compile(r"\b(Bearer|Basic|Token|Digest)\s+[^\s\"']+", re.I)
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


def stat_start_ticks(text: str) -> int:
    """``starttime`` (field 22) of a ``stat`` line: when the task started, in clock ticks since
    boot.

    Raises:
        ValueError, IndexError: the text is not a ``stat`` line.
    """
    return int(text[text.rindex(")") + 2 :].split()[19])


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
    """Progress counters and the decoded wait (:func:`watchdog.collect.waits.decode`) of every
    thread of ``pid`` (``/proc/PID/task/*``); threads that end while being read are skipped.
    Cost: four small reads per thread."""
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
                wait=waits.decode(state, _read(f"{base}/syscall")),
            )
        )
    return tuple(out)


def wchan(pid: int, tid: Optional[int] = None) -> Optional[str]:
    """The kernel function the task sleeps in (``/proc/PID[/task/TID]/wchan``); ``"0"`` when
    running or when the kernel hides it (no permission)."""
    path = f"/proc/{pid}/wchan" if tid is None else f"/proc/{pid}/task/{tid}/wchan"
    text = _read(path)
    return text.strip() if text is not None else None


def thread_details(pid: int) -> Tuple[ThreadDetail, ...]:
    """State, name, wait channel, system call, decoded wait and start time of every thread of
    ``pid`` (report time). Threads that end while being read are skipped."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return ()
    out = []
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        stat = _read(f"{base}/stat")
        if stat is None:
            continue
        try:
            comm, state, _cpu = parse_stat(stat)
            start = stat_start_ticks(stat)
        except (ValueError, IndexError):
            continue
        raw = _read(f"{base}/syscall")
        status = _read(f"{base}/status") or ""
        out.append(
            ThreadDetail(
                tid=tid,
                name=comm,
                state=state,
                wchan=wchan(pid, tid),
                syscall=raw.split()[0] if raw and raw.strip() else None,
                wait=waits.decode(state, raw),
                start_ticks=start,
                voluntary_ctxt_switches=parse_status_fields(status, "voluntary_ctxt_switches").get("voluntary_ctxt_switches"),
            )
        )
    return tuple(out)


def start_ticks(pid: int) -> Optional[int]:
    """When ``pid`` started, in clock ticks since boot (``stat`` field 22), or ``None``."""
    text = _read(f"/proc/{pid}/stat")
    try:
        return stat_start_ticks(text) if text else None
    except (ValueError, IndexError):
        return None


def fd_target(pid: int, fd: int) -> Optional[str]:
    """The target of ``pid``'s descriptor ``fd`` (``pipe:[123]``, ``socket:[456]``, a path), or
    ``None``."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def _access_mode(pid: int, fd: str) -> Optional[int]:
    text = _read(f"/proc/{pid}/fdinfo/{fd}")
    for line in (text or "").splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & 3  # O_RDONLY 0, O_WRONLY 1, O_RDWR 2
    return None


def pipe_holders(pipes) -> Tuple[Dict[str, Tuple[int, ...]], Dict[str, Tuple[int, ...]], bool]:
    """``(readers, writers, complete)`` for each pipe in ``pipes`` (``pipe:[N]`` targets): the
    pids of every process on the host holding its read or write end (``/proc/*/fd`` and
    ``fdinfo`` access modes). ``complete`` is False when some process's descriptors could not
    be read (another user's without privilege), so an unseen holder may exist. Cost: one
    directory listing per process, one readlink per descriptor; for report time only."""
    wanted = set(pipes)
    readers: Dict[str, set] = {p: set() for p in wanted}
    writers: Dict[str, set] = {p: set() for p in wanted}
    complete = True
    if not wanted:
        return {}, {}, True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue
        except OSError:
            complete = False
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                mode = _access_mode(pid, fd)
                if mode in (0, 2, None):
                    readers[target].add(pid)
                if mode in (1, 2, None):
                    writers[target].add(pid)
    return (
        {k: tuple(sorted(v)) for k, v in readers.items()},
        {k: tuple(sorted(v)) for k, v in writers.items()},
        complete,
    )


_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^/\s:@]*:)[^@\s/]+(?=@)")


def redact_env(env: Dict[str, str]) -> Dict[str, str]:
    """``env`` with the values of secret-looking keys (TOKEN, SECRET, PASSWORD, PAT, JWT, DSN,
    WEBHOOK, …) replaced, and in every other value the passwords inside URLs
    (``postgres://user:PASSWORD@host``), ``AccountKey=``/``sig=``-style parts and HTTP
    credentials (``Bearer X``) replaced (:func:`redact_value`)."""
    out = {}
    for k, v in env.items():
        out[k] = REDACTED if _SECRET_KEY.search(k) else redact_value(v)
    return out


def redact_local(name: str, value: str) -> str:
    """A local variable's ``repr`` as a report may show it: replaced when the name looks secret
    (the same names as :func:`redact_env`'s keys: ``api_key``, ``password``, ``token`` …),
    else with credentials inside it replaced (:func:`redact_value`)."""
    return REDACTED if _SECRET_KEY.search(name) else redact_value(value)


def redact_cmdline(args) -> List[str]:
    """A command line with secret-looking values replaced: ``--api-key=V`` and ``--api-key V``
    (flag names as secret-looking as :func:`redact_env`'s keys), ``TOKEN=V`` assignments, and
    passwords inside URLs and ``password=``-style parts of any argument."""
    out: List[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _value = arg.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if key and _SECRET_KEY.search(key) and (eq or name.startswith("-")):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_value(arg))
    return out


def redact_value(text: str) -> str:
    """``text`` with passwords inside URLs, ``password=``-style parts and HTTP credentials
    (``Bearer X``, ``Basic X``) replaced."""
    text = _URL_CREDENTIALS.sub(lambda m: m.group("head") + REDACTED, text)
    text = _AUTH_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _SECRET_VALUE.sub(lambda m: f"{m.group(1)}={REDACTED}", text)


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
    """The source text of each ``(file, line)`` in ``wanted`` (indentation kept, trailing
    whitespace removed), as the target sees the
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
                            out[(file, i)] = text.rstrip()
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


# The NVIDIA driver's control device: CUDA maps pinned host memory (cudaHostAlloc, PyTorch's
# CachingHostAllocator behind pin_memory) as shared mappings of it.
NVIDIA_CTL = b"/dev/nvidiactl"


def map_count(pid: int) -> Optional[int]:
    """How many memory mappings ``pid`` has (lines of ``/proc/PID/maps``), or ``None``. Cost:
    reading the whole file (about 100 bytes a mapping), hence the slow cadence."""
    return maps_summary(pid)[0]


def maps_summary(pid: int) -> Tuple[Optional[int], bool]:
    """``(mapping count, whether /dev/nvidiactl is mapped)`` from one read of
    ``/proc/PID/maps``; ``(None, False)`` when unreadable."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
    except OSError:
        return None, False
    return data.count(b"\n"), NVIDIA_CTL in data


def pinned_bytes_from_smaps(text: str) -> int:
    """Bytes of CUDA pinned host memory in a ``/proc/PID/smaps`` text: the ``Rss`` of every
    shared mapping (``s`` in its permissions) of ``/dev/nvidiactl``. Those pages count in RSS and
    never in ``VmLck``/``VmPin`` (the driver pins them itself); proc(5) describes the format."""
    total, counting = 0, False
    for line in text.splitlines():
        head = line.split(None, 6)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's header line
            counting = len(head) == 6 and head[5] == NVIDIA_CTL.decode() and head[1].endswith("s")
        elif counting and line.startswith("Rss:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                total += int(parts[1]) * 1024
    return total


def pinned_bytes(pid: int) -> Optional[int]:
    """CUDA pinned host memory of ``pid`` in bytes (:func:`pinned_bytes_from_smaps`), or
    ``None`` when ``/proc/PID/smaps`` cannot be read. Cost: the kernel walks every mapping's
    pages (milliseconds on a large process): call it only for processes that map
    ``/dev/nvidiactl``, at the slow cadence."""
    text = _read(f"/proc/{pid}/smaps")
    return None if text is None else pinned_bytes_from_smaps(text)


def max_map_count() -> Optional[int]:
    """``vm.max_map_count`` (``/proc/sys/vm/max_map_count``): the most mappings one process may
    have, or ``None``."""
    text = _read("/proc/sys/vm/max_map_count")
    try:
        return int(text) if text else None
    except ValueError:
        return None


_SHM_NAME = re.compile(r"^torch_(\d+)_")


def shm_leftovers(pids, folder: str = "/dev/shm") -> Tuple[Tuple[str, int], ...]:
    """``(name, bytes)`` of the files in ``folder`` that PyTorch's ``file_system`` sharing
    strategy created for one of ``pids`` (``torch_<pid>_<…>``, torch/csrc/CudaIPCTypes and
    libshm naming) and nobody removed. Empty when none or unreadable."""
    wanted = {str(p) for p in pids}
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return ()
    for name in sorted(names):
        m = _SHM_NAME.match(name)
        if m and m.group(1) in wanted:
            try:
                out.append((name, os.stat(os.path.join(folder, name)).st_size))
            except OSError:
                continue
    return tuple(out)


# Signals a process's own timers deliver: SIGALRM (alarm, setitimer ITIMER_REAL), SIGVTALRM and
# SIGPROF (setitimer); signal(7), setitimer(2).
_TIMER_SIGNALS = {14: "SIGALRM", 26: "SIGVTALRM", 27: "SIGPROF"}


def timer_wakeup(pid: int) -> Optional[str]:
    """Why ``pid`` might wake itself although all its threads wait without a timeout, or
    ``None``: it catches a timer signal (``SigCgt`` in ``/proc/PID/status``; a Python handler runs
    in the main thread and can release what it waits for) or has POSIX timers
    (``/proc/PID/timers``)."""
    status = _read(f"/proc/{pid}/status") or ""
    caught = 0
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            caught = int(line.split()[1], 16)
    names = [name for sig, name in _TIMER_SIGNALS.items() if caught >> (sig - 1) & 1]
    if names:
        return f"it catches {', '.join(names)}, so a timer it armed may wake it"
    if (_read(f"/proc/{pid}/timers") or "").strip():
        return "it has POSIX timers (/proc/PID/timers), which may wake it"
    return None
