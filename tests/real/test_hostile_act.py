"""Ending a job never signals a process that is not the job's (watchdog/watch/act.py).

A job's process that dies during the grace period frees its pid; a process of someone else
that then gets that pid (here forced with ``/proc/sys/kernel/ns_last_pid``, as a busy host's
pid wrap-around does by chance) has children that are not the job's, though their parent's
pid is one dlwatch holds. Every process started here runs in its own session, bounded, and
is killed whatever happens."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time

import pytest

from tests.real.helpers import DLWATCH, PY, processes_marked, wait_for
from watchdog.collect import procfs
from watchdog.types import ProcId
from watchdog.watch import act

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK),
    reason="needs root to choose the next pid (ns_last_pid)",
)


def _proc_id(pid: int) -> ProcId:
    st = procfs.proc_stat(pid)
    assert st is not None
    return ProcId(pid, st.start_ticks)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _at_pid(pid: int, cmd: list) -> subprocess.Popen:
    """``cmd`` started so that it gets ``pid`` (the next pid is ``ns_last_pid`` + 1), or skip
    when another process of the host took it first (tried a few times)."""
    for _ in range(20):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(cmd, start_new_session=True)
        if proc.pid == pid:
            return proc
        _kill_group(proc)
    pytest.skip(f"pid {pid} kept being taken by other processes")


def test_the_children_of_a_process_that_reused_a_dead_job_processs_pid_are_never_signalled():
    job = subprocess.Popen(["sleep", "60"], start_new_session=True)  # ends on SIGTERM
    stranger = None
    try:
        dead_pid = job.pid
        members = [_proc_id(job.pid)]

        def sleep(s: float) -> None:
            # During the grace period: once the job's process is gone (reaped, its pid free),
            # a stranger takes its pid and starts a child of its own.
            nonlocal stranger
            if stranger is None and job.poll() is not None:
                stranger = _at_pid(dead_pid, ["sh", "-c", "sleep 60 & wait"])
                wait_for(lambda: procfs.children_of(dead_pid), 10, "the stranger's child")
            time.sleep(s)

        # ended: the job's root counts as ended only once the stranger is in place (as dlwatch run's
        # root, reaped by dlwatch, may end after its children).
        out = act.terminate_tree(members, 3.0, ended=lambda: stranger is not None, sleep=sleep)
        assert stranger is not None, out
        (child,) = procfs.children_of(dead_pid) or (None,)
        assert child is not None and act.still_running(_proc_id(child)), "the stranger's child was signalled"
        assert stranger.poll() is None
    finally:
        if job.poll() is None:
            job.kill()
        job.wait(10)
        if stranger is not None:
            _kill_group(stranger)


FORKER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)
time.sleep(120)
"""


def _marked(marker: str) -> list:
    return processes_marked(marker)


def _ended_whole(cmd: list, marker: str, tmp_path, settle_s: float, **run) -> None:
    """Run ``cmd`` (a bounded ``dlwatch run``, its output to a file: a survivor would hold a pipe
    open), check that it SIGKILLed the job, then that no process marked ``marker`` is left
    ``settle_s`` seconds later (the SIGKILLed ones are reaped by init); SIGKILL any left."""
    try:
        with open(tmp_path / "err", "w+") as err:
            subprocess.run(cmd, stdout=err, stderr=err, timeout=120, **run)
            err.seek(0)
            stderr = err.read()
        assert "SIGKILL" in stderr, stderr[-2000:]
        deadline = time.monotonic() + settle_s
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _marked(marker)
        assert not left, f"{len(left)} processes of the job outlived it: {stderr[-1500:]}"
    finally:
        for pid in _marked(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_job_of_more_processes_than_dlwatch_has_descriptors_is_ended_whole(tmp_path):
    # 200 processes that ignore SIGTERM, dlwatch allowed 128 descriptors: one pidfd each ran out
    # (EMFILE) and 83 of them outlived the bounded run; now the rest are held by psutil handles.
    marker = f"adv-many-{os.getpid()}"
    script = tmp_path / "forker.py"
    script.write_text(FORKER)

    def few_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    cmd = DLWATCH + ["run", "--stop-after-s", "3", "--report-dir", str(tmp_path / "r"), "--"]
    cmd += [PY, str(script), "200", marker]
    _ended_whole(cmd, marker, tmp_path, 10, preexec_fn=few_fds, start_new_session=True)


FORK_LOOP = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(2):
    if os.fork() == 0:
        break
time.sleep(2.5)  # forking from the bound on
for _ in range(1500):
    if os.fork() == 0:
        os.setpgid(0, 0)  # out of the job's group: reached only as a child
        time.sleep(60)
        os._exit(0)
    time.sleep(0.004)
time.sleep(60)
"""


def test_processes_forking_in_a_loop_leave_no_child_when_killed(tmp_path):
    # Three processes fork until killed; each child leaves the group. A SIGKILLed parent's last
    # children went to init before the look after the signal (6 to 25 left a run); stopped
    # first, a parent forks no more and keeps its children for the look.
    marker = f"adv-loop-{os.getpid()}"
    script = tmp_path / "fork_loop.py"
    script.write_text(FORK_LOOP)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("terminate_grace_s: 1\n")
    cmd = DLWATCH + ["run", "--config", str(cfg), "--stop-after-s", "2", "--report-dir", str(tmp_path / "r"), "--"]
    cmd += [PY, str(script), marker]
    # its own group in this session: dlwatch does not lead a session, only tree and group count
    _ended_whole(cmd, marker, tmp_path, 5, preexec_fn=os.setpgrp)


def test_without_children_files_the_whole_tree_is_still_ended(monkeypatch):
    # A kernel without CONFIG_PROC_CHILDREN: children are found from every process's parent.
    monkeypatch.setattr(procfs, "_CHILDREN_FILES", False)
    script = "trap '' TERM; (trap '' TERM; sleep 60 & sleep 60 & wait) & sleep 60 & wait"
    root = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:

        def session() -> list:
            return [
                pid
                for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                if (st := procfs.proc_stat(pid)) is not None and st.session == root.pid and st.state != "Z"
            ]

        wait_for(lambda: len(session()) == 5, 10, "the job's five processes")
        said = act.terminate_tree([_proc_id(root.pid)], 0.5, ended=lambda: root.poll() is not None)
        assert "SIGKILL to 5" in said, said
        root.wait(10)
        wait_for(lambda: not session(), 10, "no process of the job")
    finally:
        _kill_group(root)
