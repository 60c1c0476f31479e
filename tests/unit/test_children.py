"""watchdog.children.end_tree on real processes: a child in its own session with a grandchild in
a group of its own; every one ends, ours is untouched."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from watchdog.children import end_tree

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
