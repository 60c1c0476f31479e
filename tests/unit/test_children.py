"""watchdog.children on real processes: end_tree ends a child in its own session with a grandchild
in a group of its own, ours untouched; kill_group ends a child's group, grandchildren included, and
reaps it; signal_group signals a group by number only while the child that leads it is unreaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from watchdog.children import end_tree, kill_group, signal_group

TREE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


def _start(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    return proc


def test_the_child_and_a_grandchild_in_its_own_group_end_and_we_do_not():
    proc = _start(TREE)
    grandchildren = psutil.Process(proc.pid).children(recursive=True)
    assert grandchildren
    end_tree(proc)
    assert proc.returncode is not None
    deadline = time.monotonic() + 10
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in grandchildren):
        assert time.monotonic() < deadline, "a grandchild outlived end_tree"
        time.sleep(0.05)
    assert psutil.Process(os.getpid()).is_running()


def test_sigterm_first_lets_the_child_end_by_itself_within_the_grace():
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = _start(code)
    end_tree(proc, grace_s=5.0)
    assert proc.returncode == 7  # it ran its own handler: not killed


# A child that leaves a grandchild in its own group (no new session) and prints that pid.
IN_GROUP = (
    "import subprocess, sys, time\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(p.pid, flush=True)\n"
)


def _gone(proc: psutil.Process, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _start_in_group(code: str) -> "tuple[subprocess.Popen, psutil.Process]":
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True, text=True)
    assert proc.stdout is not None
    grandchild = psutil.Process(int(proc.stdout.readline()))
    assert os.getpgid(grandchild.pid) == proc.pid
    return proc, grandchild


def test_kill_group_ends_the_child_and_its_group_and_reaps_it():
    proc, grandchild = _start_in_group(IN_GROUP + "time.sleep(60)\n")
    try:
        kill_group(proc, reap_s=5.0)
        assert proc.returncode == -9
        assert _gone(grandchild), "a process of the child's group outlived kill_group"
        assert psutil.Process(os.getpid()).is_running()
    finally:
        end_tree(proc)
        if grandchild.is_running():
            grandchild.kill()


def test_a_reaped_childs_group_is_never_signalled_by_number():
    # Once the child is reaped its pid, the group's number, may be given to another process,
    # which may lead a group of that number: signal_group refuses. Here the group still has the
    # grandchild (so the number is not reused yet), which shows that nothing was sent.
    proc, grandchild = _start_in_group(IN_GROUP)
    try:
        proc.wait(10)
        assert not signal_group(proc, 9)
        time.sleep(0.3)
        assert grandchild.is_running() and grandchild.status() != psutil.STATUS_ZOMBIE
        kill_group(proc, reap_s=1.0)  # nor by kill_group: the grandchild still runs
        assert grandchild.is_running() and grandchild.status() != psutil.STATUS_ZOMBIE
    finally:
        grandchild.kill()  # psutil checks it is still that process (its start time)


def test_signal_group_reaches_an_unreaped_child_that_already_exited_and_its_group():
    # A zombie still holds its pid: its group's number is still its own, so the group is signalled.
    proc, grandchild = _start_in_group(IN_GROUP)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert signal_group(proc, 9)
        assert _gone(grandchild)
    finally:
        proc.wait(10)
        if grandchild.is_running():
            grandchild.kill()
