"""A root dlwatch reading a job's lock file must never open (for reading) anything but the regular
file it checked: opening is itself an action on a device (``/dev/watchdog`` arms the host's
hardware watchdog on open, a tape rewinds, a FIFO's writer is released). An unprivileged job can
put a device at the lock file's path between dlwatch's check and its open: in a user and mount
namespace of its own (``unshare -rm``) it may bind-mount any node it can name over its own
file, and dlwatch walks the job's root (``/proc/PID/root``); outside one it may rename a FIFO
over it. The old reader checked by name (``lstat``) and then opened by name: a swap between the
two opened the swapped-in node as root (the later ``fstat`` only refused to read it).

Here the window is made wide on purpose: the reader runs in its own process, and strace(1)
attached to it delays the return of every ``newfstatat`` by ``DELAY_S`` (``-e
inject=newfstatat:delay_exit=``); meanwhile the test renames a FIFO over the lock file and
waits for a reader of that FIFO (a non-blocking open for writing succeeds only when one has it
open, fifo(7)). The reader must open the lock file once, by what it checked (an ``O_PATH``
descriptor, fstat, then the same file reopened through ``/proc/self/fd``), so no reader ever
comes. Every process here is bounded and killed whatever happens."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.real.helpers import kill_tree, start

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("strace") is None, reason="attaches strace to a reader (needs root and strace)"
)

DELAY_S = 1.5

READER = """
import os, subprocess, sys
from tests.unit.builders import proc, sample
from watchdog.collect import lockfiles
from watchdog.types import ROLE_MAIN
pid = int(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()  # strace is attached
found = lockfiles.find(sample(0.0, [proc(pid, ROLE_MAIN, [])]))
print("found", len(found), flush=True)
"""


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)
    return p.pid


def test_a_fifo_renamed_over_a_checked_lock_file_is_never_opened(short_tmp_path):
    work = short_tmp_path / "work"
    work.mkdir()
    lock = work / "shards.lock"
    lock.write_text(f"{_dead_pid()}\n")
    fifo = short_tmp_path / "swap"
    os.mkfifo(fifo)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], cwd=str(work))
    reader = start([sys.executable, "-c", READER, str(job.pid)], stdin=subprocess.PIPE, cwd=os.getcwd())
    tracer = None
    try:
        assert reader.stdout.readline().strip() == "ready"
        tracer = start(
            [
                "strace",
                "-qq",
                "-f",
                "-o",
                "/dev/null",
                "-e",
                "trace=newfstatat",
                "-e",
                f"inject=newfstatat:delay_exit={int(DELAY_S * 1e6)}",
                "-P",
                str(work),  # only the calls on the job's folder (its descriptor): the lock file's check
                "-p",
                str(reader.pid),
            ]
        )
        time.sleep(1.0)  # attached
        reader.stdin.write("go\n")
        reader.stdin.flush()
        # the reader's calls on the folder: the scan's fstat of it, then the lock file's lstat; the
        # rename lands halfway through the delayed return of the second
        time.sleep(DELAY_S * 1.5)
        os.rename(fifo, lock)
        # a writer blocked in open(2) until a reader opens the FIFO (fifo(7))
        writer = start(
            [sys.executable, "-c", "import os, sys; os.open(sys.argv[1], os.O_WRONLY); print('opened')", str(lock)]
        )
        try:
            out, _ = writer.communicate(timeout=DELAY_S * 4)
        except subprocess.TimeoutExpired:
            out = ""
        finally:
            kill_tree(writer)
        assert reader.wait(30) == 0
        opened = "opened" in (out or "")
        assert not opened, "the reader opened the FIFO swapped in after its check"
    finally:
        for p in (tracer, reader):
            if p is not None:
                kill_tree(p)
        job.kill()
        job.wait(30)
