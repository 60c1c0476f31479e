"""Exit records of the job's processes other than main and its workers (NOTE [ Exit records ]
in watchdog/collect/sampler.py): a real job's children that exit, are killed, or are reaped
before a sample sees them, and what each record says (proc(5), ``/proc/PID/stat`` field 52)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from watchdog.collect import procfs
from watchdog.collect.read_plan import ReadPlan
from watchdog.collect.sampler import Sampler
from watchdog.types import NO_EXIT_RECORD, ROLE_OTHER, ExitRecord

# A main that forks three helpers, prints their pids, and on SIGUSR1: the first exits with code
# 3 (left a zombie), the second is SIGKILLed (left a zombie), the third exits and is reaped at once.
_JOB = (
    "import os, signal, sys, time\n"
    "def kid(code):\n"
    "    r, w = os.pipe()\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        os.close(w); os.read(r, 1); os._exit(code)\n"
    "    os.close(r)\n"
    "    return pid, w\n"
    "kids = [kid(3), kid(0), kid(5)]\n"
    "def end(*_):\n"
    "    os.write(kids[0][1], b'x')\n"
    "    os.kill(kids[1][0], signal.SIGKILL)\n"
    "    os.write(kids[2][1], b'x'); os.waitpid(kids[2][0], 0)\n"
    "signal.signal(signal.SIGUSR1, end)\n"
    "print(' '.join(str(p) for p, _ in kids), flush=True)\n"
    "while True:\n"
    "    time.sleep(60)\n"
)


@pytest.fixture
def job():
    proc = subprocess.Popen([sys.executable, "-c", _JOB], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield proc, [int(x) for x in proc.stdout.readline().split()]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_zombie_keeps_its_exit_code_or_signal_and_a_reaped_helper_has_no_record(job):
    proc, (exits3, killed, reaped) = job
    sampler = Sampler(proc.pid, full_info_interval_s=10.0, clock=lambda: time.time() + 3600)
    deadline = time.monotonic() + 20
    first = sampler.sample()
    while len(first.processes) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
        first = sampler.sample()
    assert {exits3, killed, reaped} <= {p.pid for p in first.processes}
    assert first.exits == ()
    os.kill(proc.pid, signal.SIGUSR1)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        later = sampler.sample()
        if len(later.exits) == 3:
            break
    records = {r.pid: r for r in later.exits}
    assert set(records) == {exits3, killed, reaped}
    assert records[exits3].exit_code == 3 and records[exits3].how() == "exited with code 3"
    assert records[killed].signal == signal.SIGKILL and records[killed].how() == "was killed by signal 9 (SIGKILL)"
    assert records[reaped].status is None and records[reaped].how() == NO_EXIT_RECORD
    for r in records.values():
        assert r.ppid == proc.pid and r.last_seen_mono <= r.ended_mono and r.ended_wall > 0
    again = sampler.sample()
    assert again.exits is later.exits  # nothing else ended: the same tuple, no new record
    assert sampler.sample(ReadPlan(lean=True)).exits == later.exits


def test_an_exit_status_is_trusted_only_with_the_access_the_kernel_asks():
    # The kernel prints field 52 as 0 to a reader without ptrace read access: a forged "clean exit".
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    try:
        deadline = time.monotonic() + 10
        while (procfs.proc_stat(pid) or procfs.proc_stat(os.getpid())).state != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        st = procfs.proc_stat(pid)
        assert st is not None and st.state == "Z"
        assert procfs.may_read_exit_status(pid)  # our own child: same ids
        assert procfs.zombie_exit_status(pid, st.start_ticks) == 7 << 8
        assert procfs.zombie_exit_status(pid, st.start_ticks + 1) is None  # another process with that pid
        assert procfs.zombie_exit_status(os.getpid(), procfs.proc_stat(os.getpid()).start_ticks) is None  # alive
    finally:
        os.waitpid(pid, 0)
    line = b"12 (x) Z 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0 " + b"0 " * 27 + b"2304\n"
    assert procfs.parse_proc_stat(line).exit_status == 2304
    assert procfs.parse_proc_stat(b"12 (x) S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n").exit_status == 0


def test_an_exit_record_says_how_from_the_wait_status():
    def rec(status):
        return ExitRecord(1, 2, 3, ROLE_OTHER, "python3", ("python3",), 1.0, 1.0, 2.0, 2.0, status)

    assert rec(1 << 8).how() == "exited with code 1"
    assert rec(0).how() == "exited with code 0"
    assert rec(11 | 0x80).how() == "was killed by signal 11 (SIGSEGV) (core dumped)"
    assert rec(15).signal == 15 and rec(15).exit_code is None
    assert rec(None).how() == NO_EXIT_RECORD and "SIGKILL" in NO_EXIT_RECORD
