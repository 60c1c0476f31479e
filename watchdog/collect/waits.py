"""Decode what a blocked thread waits for, from ``/proc/PID/task/TID/syscall`` and its state.

The ``syscall`` file (proc(5); ``Documentation/filesystems/proc.rst``) holds the number of the
system call the thread is blocked in, its six arguments and the stack and program counters, in
hex: ``202 0x5561c80fe7c0 0x189 0x0 0x0 0x0 0xffffffff 0x7f68… 0x7f68…``. It reads ``running``
for a thread on a CPU and ``-1 sp pc`` for one blocked outside a system call. Reading it needs
ptrace-read access, as wchan and py-spy do.

What the arguments tell (futex(2), poll(2), select(2), epoll_wait(2)):

* futex: the operation word (argument 2) carries ``FUTEX_PRIVATE_FLAG`` (128) for a
  process-private futex, which only a thread of the same process can wake; argument 4 is the
  timeout pointer, 0 for none. Measured here: a ``threading.Lock`` acquired with no timeout
  shows op ``0x189`` and timeout 0; with a timeout op ``0x89`` and a pointer; a
  ``multiprocessing.Lock`` op ``0x109`` (shared).
* poll: argument 3 is the timeout in milliseconds, negative for none (a socket with
  ``settimeout(30)`` polls with ``0x7530``); ppoll, select and pselect6 take a pointer, 0 for
  none; epoll_wait's argument 4 is in milliseconds.

Pure functions: the collectors read the files, this module only decodes text.
"""

from __future__ import annotations

import platform
from typing import Dict, Optional, Sequence

from ..types import WAIT_OPS, KernelWait, WaitKind, WaitOp

# System call numbers by architecture: arch/x86/entry/syscalls/syscall_64.tbl and
# include/uapi/asm-generic/unistd.h (arm64 and other new architectures).
SYSCALLS_X86_64: Dict[int, str] = {
    0: "read",
    1: "write",
    2: "open",
    7: "poll",
    17: "pread64",
    18: "pwrite64",
    19: "readv",
    20: "writev",
    23: "select",
    34: "pause",
    35: "nanosleep",
    42: "connect",
    43: "accept",
    44: "sendto",
    45: "recvfrom",
    46: "sendmsg",
    47: "recvmsg",
    61: "wait4",
    72: "fcntl",
    73: "flock",
    128: "rt_sigtimedwait",
    219: "restart_syscall",
    130: "rt_sigsuspend",
    202: "futex",
    230: "clock_nanosleep",
    232: "epoll_wait",
    247: "waitid",
    257: "openat",
    270: "pselect6",
    271: "ppoll",
    281: "epoll_pwait",
    288: "accept4",
    441: "epoll_pwait2",
    449: "futex_waitv",
}
SYSCALLS_GENERIC: Dict[int, str] = {
    22: "epoll_pwait",
    25: "fcntl",
    32: "flock",
    56: "openat",
    63: "read",
    64: "write",
    65: "readv",
    66: "writev",
    67: "pread64",
    68: "pwrite64",
    72: "pselect6",
    73: "ppoll",
    128: "restart_syscall",
    95: "waitid",
    98: "futex",
    101: "nanosleep",
    115: "clock_nanosleep",
    133: "rt_sigsuspend",
    137: "rt_sigtimedwait",
    202: "accept",
    203: "connect",
    206: "sendto",
    207: "recvfrom",
    211: "sendmsg",
    212: "recvmsg",
    242: "accept4",
    260: "wait4",
    441: "epoll_pwait2",
    449: "futex_waitv",
}

FUTEX_PRIVATE_FLAG = 128
FUTEX_CLOCK_REALTIME = 256
_FUTEX_CMD_MASK = ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
# futex commands that wait (FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI,
# FUTEX_LOCK_PI2), from include/uapi/linux/futex.h.
_FUTEX_WAIT_CMDS = {
    0: "FUTEX_WAIT",
    6: "FUTEX_LOCK_PI",
    9: "FUTEX_WAIT_BITSET",
    11: "FUTEX_WAIT_REQUEUE_PI",
    13: "FUTEX_LOCK_PI2",
}


def _calls(*ops: WaitOp) -> frozenset:
    return frozenset(name for name, op in WAIT_OPS.items() if op in ops)


# The sets below come from the one table of system calls by operation (types.WAIT_OPS).
_FD_CALLS = _calls(WaitOp.READ, WaitOp.WRITE, WaitOp.ACCEPT, WaitOp.CONNECT)
_OPEN_CALLS = _calls(WaitOp.OPEN)
# System calls that read or write a descriptor's data (a wait in one is woken by the other end).
READ_CALLS = _calls(WaitOp.READ)
WRITE_CALLS = _calls(WaitOp.WRITE)
# flock(fd, LOCK_EX) and fcntl(fd, F_SETLKW/F_OFD_SETLKW, …): a wait for a lock that another
# open file holds on the same file (flock(2), fcntl(2)); /proc/locks names the holder.
LOCK_CALLS = _calls(WaitOp.LOCK)
_SLEEP_CALLS = frozenset({"nanosleep", "clock_nanosleep"})
_SIGNAL_CALLS = frozenset({"pause", "rt_sigsuspend"})


def syscall_table(machine: Optional[str] = None) -> Dict[int, str]:
    """The number-to-name table of ``machine`` (``platform.machine()`` by default); empty for
    an architecture whose numbers are not known here."""
    m = machine or platform.machine()
    if m in ("x86_64", "amd64"):
        return SYSCALLS_X86_64
    if m in ("aarch64", "arm64", "riscv64", "loongarch64"):
        return SYSCALLS_GENERIC
    return {}


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _futex(args: Sequence[int]) -> KernelWait:
    op = args[1]
    cmd = op & _FUTEX_CMD_MASK & 0xFFFFFFFF
    name = _FUTEX_WAIT_CMDS.get(cmd)
    if name is None:  # FUTEX_WAKE and the like do not block for long
        return KernelWait(WaitKind.OTHER, "futex", futex_op=op, detail=f"futex(op {op:#x})")
    private = bool(op & FUTEX_PRIVATE_FLAG)
    flags = (
        name
        + ("|FUTEX_PRIVATE_FLAG" if private else "")
        + ("|FUTEX_CLOCK_REALTIME" if op & FUTEX_CLOCK_REALTIME else "")
    )
    if args[3] != 0:
        return KernelWait(WaitKind.TIMED, "futex", futex_op=op, detail=f"futex({flags}) with a timeout")
    kind = WaitKind.FUTEX_PRIVATE if private else WaitKind.FUTEX_SHARED
    return KernelWait(kind, "futex", futex_op=op, detail=f"futex({flags}), no timeout")


def _poll_like(name: str, args: Sequence[int]) -> KernelWait:
    if name in ("poll", "epoll_wait", "epoll_pwait"):
        timeout_ms = _signed(args[2] if name == "poll" else args[3], 32)
        if timeout_ms < 0:
            return KernelWait(WaitKind.FD, name, detail=f"{name}, no timeout")
        return KernelWait(WaitKind.TIMED, name, timeout_ms=timeout_ms, detail=f"{name}, timeout {timeout_ms} ms")
    pointer = args[4] if name in ("select", "pselect6") else args[2] if name == "ppoll" else args[3]
    if pointer == 0:
        return KernelWait(WaitKind.FD, name, detail=f"{name}, no timeout")
    return KernelWait(WaitKind.TIMED, name, detail=f"{name} with a timeout")


def decode(state: Optional[str], syscall_text: Optional[str], machine: Optional[str] = None) -> KernelWait:
    """What a thread waits for, from its state letter (``stat`` field 3) and the text of its
    ``syscall`` file (``None`` when unreadable).

    The state decides first: R is running, D disk I/O, T/t stopped, Z/X a zombie. Then the
    system call and its arguments (see the module docstring). Never raises: text that cannot
    be decoded gives ``UNKNOWN`` (unreadable) or ``OTHER``.
    """
    raw = syscall_text.strip() if syscall_text else None
    if state in ("T", "t"):
        return KernelWait(WaitKind.STOPPED, detail="stopped (SIGSTOP, a debugger or job control)", raw=raw)
    if state in ("Z", "X"):
        return KernelWait(WaitKind.ZOMBIE, detail="exited, not reaped", raw=raw)
    if state == "R" or raw == "running":
        return KernelWait(WaitKind.RUNNING, detail="running", raw=raw)
    fields = raw.split() if raw else []
    name: Optional[str] = None
    args: list = []
    if fields:
        try:
            number = int(fields[0])
            args = [int(x, 16) for x in fields[1:7]]
        except ValueError:
            number = None
        if number is not None and number >= 0:
            name = syscall_table(machine).get(number, str(number))
    if state == "D":
        return KernelWait(
            WaitKind.DISK,
            name,
            fd=args[0] if name in _FD_CALLS and args else None,
            detail="uninterruptible sleep (D)",
            raw=raw,
        )
    if name is None or len(args) < 6:
        kind = WaitKind.UNKNOWN if not raw else WaitKind.OTHER
        return KernelWait(kind, name, detail="not in a system call" if raw else "unreadable", raw=raw)
    if name == "futex":
        found = _futex(args)
    elif name in ("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2"):
        found = _poll_like(name, args)
    elif name in _SLEEP_CALLS:
        found = KernelWait(WaitKind.TIMED, name, detail="sleeping")
    elif name in _FD_CALLS:
        fd = _signed(args[0], 32)
        found = KernelWait(WaitKind.FD, name, fd=fd, detail=f"{name} on fd {fd}, no timeout")
    elif name in LOCK_CALLS:
        fd = _signed(args[0], 32)
        found = KernelWait(WaitKind.FD, name, fd=fd, detail=f"{name} on fd {fd}: waits for a file lock, no timeout")
    elif name in _OPEN_CALLS:
        found = KernelWait(WaitKind.FD, name, detail=f"{name}, no timeout")
    elif name == "restart_syscall":
        # The kernel restarts this way only calls with a timeout (nanosleep, poll, futex waits)
        # after a stop (a debugger, py-spy attaching): restart_syscall(2).
        found = KernelWait(WaitKind.TIMED, name, detail="a timed wait, restarted after an interruption")
    elif name in ("wait4", "waitid"):
        found = KernelWait(WaitKind.CHILD, name, detail="waiting for a child process to exit")
    elif name == "rt_sigtimedwait":
        found = KernelWait(WaitKind.TIMED if args[2] else WaitKind.OTHER, name, detail="waiting for a signal")
    elif name in _SIGNAL_CALLS:
        found = KernelWait(WaitKind.OTHER, name, detail="waiting for a signal")
    elif name == "futex_waitv":
        kind = WaitKind.TIMED if args[3] else WaitKind.FUTEX_SHARED  # per-waiter flags are not visible here
        found = KernelWait(kind, name, detail="futex_waitv")
    else:
        found = KernelWait(WaitKind.OTHER, name, detail=f"in system call {name}")
    return KernelWait(found.kind, found.syscall, found.timeout_ms, found.fd, found.futex_op, found.detail, raw)
