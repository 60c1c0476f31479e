"""A root dlwatch reads the lock files of a job (``watchdog.collect.lockfiles``, issue #34 "waits
on the dead") in a folder another local user can write: that user plants a link to a root file,
a FIFO, a file of their own naming a dead pid, and a linked folder; dlwatch must follow no link,
open no FIFO (a blocking open would freeze it), take nothing the job's user does not own, and
still find the job's own stale lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.real.conftest import SYSTEM_PY, as_user
from tests.unit.builders import proc, sample
from watchdog.collect import lockfiles
from watchdog.types import ROLE_MAIN

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)


def _dead_pid() -> int:
    p = subprocess.Popen([SYSTEM_PY, "-c", "pass"])
    p.wait(30)
    return p.pid


def test_planted_links_fifos_and_another_users_lock_files_are_never_followed_opened_or_taken(
    attacker, shared_tmp, tmp_path
):
    secret = tmp_path / "root-only.lock"  # root's own file, 0600, in a folder only root can read
    secret.write_text(f"{_dead_pid()}\n")
    os.chmod(secret, 0o600)
    dead = _dead_pid()
    plant = (
        "import os, sys\n"
        "d, secret, dead = sys.argv[1], sys.argv[2], sys.argv[3]\n"
        "os.symlink(secret, os.path.join(d, 'link.lock'))\n"
        "os.mkfifo(os.path.join(d, 'fifo.lock'))\n"
        "open(os.path.join(d, 'theirs.lock'), 'w').write(dead + '\\n')\n"
        "os.symlink('/root', os.path.join(d, 'folder'))\n"
    )
    planter = as_user(attacker, [SYSTEM_PY, "-c", plant, shared_tmp, str(secret), str(dead)])
    assert planter.wait(30) == 0
    own = os.path.join(shared_tmp, "job-shards.lock")  # the job's (root's) own stale lock
    with open(own, "w") as f:
        f.write(f"{dead}\n")
    job = subprocess.Popen(
        [SYSTEM_PY, "-c", "import time; time.sleep(60)"], env={"PATH": "/usr/bin:/bin", "TMPDIR": shared_tmp}, cwd="/"
    )
    try:
        smp = sample(0.0, [proc(job.pid, ROLE_MAIN, [])])
        open_files = [(job.pid, (os.path.join(shared_tmp, "folder", "data.bin"),))]  # a folder through a link
        started = time.monotonic()
        found = {os.path.basename(x.path): x for x in lockfiles.find(smp, open_files)}
        assert time.monotonic() - started < 30, "a planted FIFO froze the reader"
    finally:
        job.kill()
        job.wait(30)
    assert found.get("job-shards.lock") is not None and found["job-shards.lock"].holder == "gone"
    for planted in ("link.lock", "fifo.lock", "theirs.lock", "root-only.lock"):
        assert planted not in found, planted
