"""A wait chain followed through real processes (watchdog/collect/chain.py): a reader of a
pipe whose other end a child holds, and that child's own wait on its standard input. Both
processes are killed whatever happens."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from watchdog.collect import chain, procfs
from watchdog.types import LinkKind


def test_a_chain_follows_a_pipe_to_the_child_that_holds_its_other_end_and_that_childs_own_wait():
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nsys.stdin.readline()\n"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        time.sleep(0.5)
        reader = subprocess.Popen(
            [sys.executable, "-c", "import os, sys\nos.read(int(sys.argv[1]), 1)\n", str(child.stdout.fileno())],
            pass_fds=(child.stdout.fileno(),),
        )
        try:
            deadline = time.monotonic() + 10
            detail = None
            while time.monotonic() < deadline:
                detail = next((d for d in procfs.thread_details(reader.pid) if d.tid == reader.pid), None)
                if detail is not None and detail.wait is not None and detail.wait.syscall == "read":
                    break
                time.sleep(0.1)
            links = chain.follow(reader.pid, detail)
            assert [x.kind for x in links][:2] == [LinkKind.PIPE, LinkKind.PIPE], links
            assert str(child.pid) in links[0].peer and links[0].reading
            assert links[1].pid == child.pid and links[1].fd == 0 and str(os.getpid()) in links[1].peer
            # Bounded to the job: a process outside it is named, and nothing more of it is read.
            bounded = chain.follow(reader.pid, detail, {reader.pid})
            assert len(bounded) == 2 and bounded[1].pid == child.pid and bounded[1].wait == "a process outside the job"
        finally:
            reader.kill()
            reader.wait(10)
    finally:
        child.kill()
        child.wait(10)
