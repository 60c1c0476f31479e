"""Kernel waits and descriptor targets are records decoded once, in collect/: detect/ and
diagnose/ test ``FdTarget.kind`` and ``KernelWait.op``, never link text or system call names
(issue #36). The decoders are checked on real ``/proc`` links and ``syscall`` lines: this
process's own pipe, socket, eventfd and files, a child blocked reading a pipe and one blocked
in ``flock``, and the captured lines of tests/fixtures/proc_task_syscall.txt."""

from __future__ import annotations

import fcntl
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.builders import MAIN_PID, WORKER_PID, hang_facts
from watchdog.collect import procfs, waits
from watchdog.types import FdKind, FdTarget, KernelWait, PipeEnds, WaitKind, WaitOp

ROOT = Path(__file__).resolve().parents[2]
DECODED_ROOMS = ("watchdog/detect", "watchdog/diagnose")

# What a consumer must not do: parse a descriptor's link text, or test a system call's name.
# Names that are also plain words or wchan families (read, write, open, poll, select, futex) are
# left to the ``.syscall`` rule: ``family in ("poll", "futex")`` tests a wait channel, not a call.
_SYSCALL_NAMES = (
    "readv|pread64|recvfrom|recvmsg|writev|pwrite64|sendto|sendmsg|flock|fcntl|accept|accept4"
    "|openat|openat2|creat|ppoll|pselect6|epoll_wait|epoll_pwait|epoll_pwait2"
    "|nanosleep|clock_nanosleep|wait4|waitid|restart_syscall|futex_waitv|rt_sigtimedwait|rt_sigsuspend"
)
FORBIDDEN = {
    "link text pipe:": re.compile(r"[\"']pipe:"),
    "link text socket:": re.compile(r"[\"']socket:"),
    "link text anon_inode:": re.compile(r"[\"']anon_inode:"),
    "a path test startswith('/')": re.compile(r"startswith\(\(?[\"']/"),
    "a test of .syscall": re.compile(r"\.syscall\s*(==|!=|in\b|not\s+in\b)"),
    "collect.waits' name sets": re.compile(r"\b(READ_CALLS|WRITE_CALLS|LOCK_CALLS)\b"),
    "a system call name in a set or tuple": re.compile(
        r"[(\[{,]\s*[\"'](" + _SYSCALL_NAMES + r")[\"']\s*[,)\]}]"  # ("accept", …) / {"flock"}
    ),
    "a comparison with a system call name": re.compile(r"==\s*[\"'](" + _SYSCALL_NAMES + r")[\"']"),
}


def parsing_sites(root: Path = ROOT):
    """``(file, line number, rule, line)`` of each forbidden pattern in detect/ and diagnose/."""
    out = []
    for room in DECODED_ROOMS:
        for path in sorted((root / room).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                for rule, pattern in FORBIDDEN.items():
                    if pattern.search(code):
                        out.append((str(path.relative_to(root)), n, rule, line.strip()))
    return out


def test_detect_and_diagnose_parse_no_link_text_and_test_no_syscall_names():
    assert parsing_sites() == []


def test_the_scan_finds_the_parsing_it_forbids(tmp_path):
    room = tmp_path / "watchdog" / "diagnose"
    room.mkdir(parents=True)
    (room / "old.py").write_text(
        'a = target.startswith("pipe:")\n'
        'b = t.startswith("/") and not t.startswith(("/dev/", "/proc/"))\n'
        'c = w.syscall in ("write", "writev")\n'
        'd = frozenset({"accept", "accept4"})\n'
        "from ..collect.waits import LOCK_CALLS\n"
        'e = "ok: reads or writes pipe:[5] in prose"\n'
    )
    found = {rule for _, _, rule, _ in parsing_sites(tmp_path)}
    assert found == {
        "link text pipe:",
        "a path test startswith('/')",
        "a test of .syscall",
        "a system call name in a set or tuple",
        "collect.waits' name sets",
    }


# --- descriptor targets, from this process's real /proc/self/fd links ---------------------------


def _link(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def test_a_real_pipe_and_socket_decode_with_their_inodes():
    r, w = os.pipe()
    a, b = socket.socketpair()
    try:
        for fd, kind in ((r, FdKind.PIPE), (w, FdKind.PIPE), (a.fileno(), FdKind.SOCKET)):
            text = _link(fd)
            got = FdTarget.decode(text)
            assert (got.kind, got.inode, got.path) == (kind, os.fstat(fd).st_ino, text)
            assert str(got) == text  # shown in reports as read
            assert procfs.read_fd_target(os.getpid(), fd) == got
        assert procfs.read_fd_target(os.getpid(), 10**6) is None  # no such descriptor
    finally:
        for fd in (r, w):
            os.close(fd)
        a.close()
        b.close()


def test_real_files_devices_kernel_files_and_anonymous_inodes_decode_by_kind(tmp_path):
    data = tmp_path / "x.bin"
    data.write_bytes(b"1")
    opened = [
        (os.open(data, os.O_RDONLY), FdKind.FILE),
        (os.open("/dev/null", os.O_RDONLY), FdKind.DEVICE),
        (os.open("/proc/self/stat", os.O_RDONLY), FdKind.KERNEL),
    ]
    if hasattr(os, "eventfd"):
        opened.append((os.eventfd(0), FdKind.ANON))
    try:
        for fd, kind in opened:
            got = FdTarget.decode(_link(fd))
            assert got.kind is kind and got.inode is None, got
            assert got.is_path is (kind is not FdKind.ANON)
        mine = dict((t.path, t.kind) for t in procfs.open_targets(os.getpid(), 4096))
        assert mine[str(data)] is FdKind.FILE and mine["/dev/null"] is FdKind.DEVICE
    finally:
        for fd, _ in opened:
            os.close(fd)


@pytest.mark.parametrize(
    "text, kind, inode",
    [
        ("pipe:[4026]", FdKind.PIPE, 4026),
        ("socket:[148200]", FdKind.SOCKET, 148200),
        ("socket:[x]", FdKind.SOCKET, None),  # malformed: no inode, no error
        ("anon_inode:[eventfd]", FdKind.ANON, None),
        ("anon_inode:inotify", FdKind.ANON, None),
        ("/dev/pts/3", FdKind.DEVICE, None),
        ("/dev/shm/torch_12_34_0 (deleted)", FdKind.SHM, None),
        ("/sys/fs/cgroup/cpu.stat", FdKind.KERNEL, None),
        ("/data/shard 1.tar (deleted)", FdKind.FILE, None),
        ("net:[4026531840]", FdKind.OTHER, None),
        ("", FdKind.OTHER, None),
    ],
)
def test_link_text_shapes_decode_without_raising(text, kind, inode):
    got = FdTarget.decode(text)
    assert (got.kind, got.inode, got.path) == (kind, inode, text)


def test_the_census_keeps_counting_proc_and_sys_files_as_files():
    assert procfs.fd_kind("/proc/1/stat") is FdKind.FILE and procfs.fd_kind("/dev/shm/x") is FdKind.SHM


def test_facts_and_pipe_ends_given_link_text_decode_it_on_load():
    facts = hang_facts(
        [],
        fd_targets=(((WORKER_PID, 6), "pipe:[9]"),),
        open_files=((WORKER_PID, ("/data/a.bin", "socket:[5]")),),
    )
    (((_key, target),)) = facts.fd_targets
    assert target == FdTarget(FdKind.PIPE, "pipe:[9]", 9)
    assert [t.kind for t in facts.open_files[0][1]] == [FdKind.FILE, FdKind.SOCKET]
    pipes = PipeEnds({(MAIN_PID, 9): "pipe:[77]"}, {"pipe:[77]": (MAIN_PID,)}, {}, True)
    assert pipes.targets[(MAIN_PID, 9)].kind is FdKind.PIPE
    decoded = PipeEnds({(MAIN_PID, 9): target}, {}, {}, True)
    assert decoded.targets[(MAIN_PID, 9)] is target  # already decoded: kept as is


# --- kernel waits' operations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "label, op",
    [
        ("pipe_read", WaitOp.READ),
        ("mp_queue_get", WaitOp.READ),
        ("socket_recv_no_timeout", WaitOp.READ),
        ("pipe_write_full", WaitOp.WRITE),
        ("threading_lock_acquire", WaitOp.FUTEX),
        ("main_try_get_data_idle_poll", WaitOp.POLL),
        ("time_sleep", WaitOp.SLEEP),
        ("subprocess_run_wait", WaitOp.CHILD),
        ("running_thread", WaitOp.OTHER),
        ("blocked_outside_syscall", WaitOp.OTHER),
    ],
)
def test_captured_syscall_lines_decode_to_their_operation(label, op):
    lines = (ROOT / "tests/fixtures/proc_task_syscall.txt").read_text().splitlines()
    (line,) = [x for x in lines if x.startswith(label + "\t")]
    _, state, text, _ = line.split("\t")
    assert waits.decode(state, text or None, "x86_64").op is op


def test_every_name_the_syscall_tables_give_has_one_operation_from_the_one_table():
    names = set(waits.SYSCALLS_X86_64.values()) | set(waits.SYSCALLS_GENERIC.values())
    assert {n for n in names if KernelWait(WaitKind.FD, n).op is WaitOp.OTHER} == set()
    assert waits.READ_CALLS == {"read", "readv", "pread64", "recvfrom", "recvmsg"}
    assert waits.LOCK_CALLS == {"flock", "fcntl"}
    assert KernelWait(WaitKind.FD, "accept4").op is WaitOp.ACCEPT
    assert KernelWait(WaitKind.TIMED, "restart_syscall").op is WaitOp.RESTART
    assert KernelWait(WaitKind.UNKNOWN).op is WaitOp.OTHER and KernelWait(WaitKind.OTHER, "999").op is WaitOp.OTHER


def _blocked_wait(proc: subprocess.Popen, timeout_s: float = 15.0):
    """The main thread's decoded wait once it blocks in a system call other than its start-up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [d.wait for d in procfs.thread_details(proc.pid) if d.tid == proc.pid and d.wait is not None]
        if found and found[0].kind in (WaitKind.FD, WaitKind.TIMED) and found[0].op is not WaitOp.OTHER:
            return found[0]
        time.sleep(0.05)
    return None


def _run_blocked(code: str, *pass_fds: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], pass_fds=pass_fds)


@pytest.mark.timeout(60)
def test_a_live_pipe_reader_waits_in_a_read_on_a_pipe():
    r, w = os.pipe()
    proc = _run_blocked(f"import os, sys; print('ready', file=sys.stderr); os.read({r}, 1)", r)
    try:
        wait = _blocked_wait(proc)
        if wait is None:
            pytest.skip("the child's syscall file is unreadable here (ptrace access)")
        assert wait.op is WaitOp.READ and wait.syscall == "read" and wait.fd == r
        target = procfs.read_fd_target(proc.pid, r)
        assert target is not None and target.kind is FdKind.PIPE and target.inode == os.fstat(r).st_ino
    finally:
        proc.kill()
        proc.wait(timeout=10)
        os.close(r)
        os.close(w)


@pytest.mark.timeout(60)
def test_a_live_flock_waiter_waits_in_a_lock(tmp_path):
    path = tmp_path / "held.lock"
    path.write_text("")
    with open(path) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = _run_blocked(f"import fcntl; f = open({str(path)!r}); fcntl.flock(f, fcntl.LOCK_EX)")
        try:
            wait = _blocked_wait(proc)
            if wait is None:
                pytest.skip("the child's syscall file is unreadable here (ptrace access)")
            assert wait.op is WaitOp.LOCK and wait.syscall == "flock"
            assert wait.fd is not None
            target = procfs.read_fd_target(proc.pid, wait.fd)
            assert target is not None and target.kind is FdKind.FILE and target.path == str(path)
        finally:
            proc.kill()
            proc.wait(timeout=10)
