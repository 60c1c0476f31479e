"""The job names the files dlwatch reads source lines from: a frame's file is the code object's
``co_filename``, which any job sets (``exec(compile(src, "/etc/shadow", "exec"))``); the report
then shows the line at the frame (``iterating at FILE:LINE in <module>: `LINE TEXT` ``, the code
near a poll, the lock-order lines). A root dlwatch read that file as root, through
``/proc/PID/root``, following links, with a blocking open(2) and no check of what it is
(procfs.source_lines): a job could have a root-only file's lines put in its report, and a FIFO
named as its file froze the examination (no report, no action).

A source file is read only when the job's own user could read it (its mode bits for the job's
real uid and groups, ``/proc/PID/status``), when it is a regular file (fstat), opened without
following a last link and without blocking. Every process here is bounded and killed."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from tests.real.conftest import SYSTEM_PY, as_user
from watchdog.collect import procfs

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)


def test_a_frame_file_the_jobs_user_cannot_read_is_never_read_for_it(attacker, tmp_path):
    os.chmod(tmp_path, 0o755)
    secret = tmp_path / "root-only.py"
    secret.write_text("TOPSECRET = 'root only'\n")
    os.chmod(secret, 0o600)
    readable = tmp_path / "theirs.py"
    readable.write_text("x = 1\n")
    os.chmod(readable, 0o644)
    link = tmp_path / "link.py"
    os.symlink(secret, link)
    job = as_user(attacker, [SYSTEM_PY, "-c", "import time; time.sleep(60)"])
    try:
        got = procfs.source_lines(job.pid, [(str(secret), 1), (str(readable), 1), (str(link), 1)])
    finally:
        job.kill()
        job.wait(30)
    assert got.get((str(readable), 1)) == "x = 1"  # what the job's user may read is read
    assert (str(secret), 1) not in got, got
    assert (str(link), 1) not in got, got


def test_a_frame_file_that_is_a_fifo_never_blocks_the_reader(attacker, tmp_path):
    os.chmod(tmp_path, 0o755)
    fifo = tmp_path / "code.py"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o666)
    job = as_user(attacker, [SYSTEM_PY, "-c", "import time; time.sleep(60)"])
    done = []
    reader = threading.Thread(target=lambda: done.append(procfs.source_lines(job.pid, [(str(fifo), 1)])), daemon=True)
    try:
        reader.start()
        reader.join(20)
        blocked = reader.is_alive()
        if blocked:  # release the reader: a writer's open ends its blocking open
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(10)
    finally:
        job.kill()
        job.wait(30)
    assert not blocked, "source_lines blocked in open(2) of a FIFO the job named as its source file"
    assert done == [{}]
