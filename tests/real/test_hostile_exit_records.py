"""Exit records read by a dlwatch that another user's zombie does not trust it with (NOTE [ Exit
records ] in watchdog/collect/sampler.py): the kernel prints ``/proc/PID/stat`` field 52
(``exit_code``) as 0 to a reader without ptrace read access (proc(5); fs/proc/array.c), which
read as it is would claim a clean exit. An unprivileged reader (the test's second local user,
its ids dropped to in a fork of the test) must get no exit status at all, never a made-up 0."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from watchdog.collect import procfs

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)


def _read_as(user, pid: int, start_ticks: int) -> dict:
    """What an unprivileged process of ``user`` reads of zombie ``pid``: a fork of this test that
    drops to that user's ids (every capability goes with uid 0) and answers through a pipe."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the fork
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(user.pw_gid, user.pw_gid, user.pw_gid)
            os.setresuid(user.pw_uid, user.pw_uid, user.pw_uid)
            st = procfs.proc_stat(pid)
            doc = {
                "raw": st.exit_status if st is not None else None,
                "state": st.state if st is not None else None,
                "may": procfs.may_read_exit_status(pid),
                "status": procfs.zombie_exit_status(pid, start_ticks),
            }
            os.write(w, json.dumps(doc).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        os.waitpid(child, 0)
        with os.fdopen(r, "rb") as f:
            return json.loads(f.read() or b"{}")
    except BaseException:
        os.close(r)
        raise


def test_another_users_zombie_is_never_said_to_have_exited_cleanly(attacker):
    victim = os.fork()
    if victim == 0:  # pragma: no cover - root's child, left a zombie with exit code 7
        os._exit(7)
    try:
        deadline = time.monotonic() + 10
        st = procfs.proc_stat(victim)
        while (st is None or st.state != "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
            st = procfs.proc_stat(victim)
        assert st is not None and st.state == "Z"
        assert procfs.zombie_exit_status(victim, st.start_ticks) == 7 << 8  # root reads it
        seen = _read_as(attacker, victim, st.start_ticks)
        assert seen["state"] == "Z" and seen["raw"] == 0  # what the kernel shows that user: a forged clean exit
        assert seen["may"] is False and seen["status"] is None  # ... which dlwatch never takes for one
    finally:
        os.waitpid(victim, 0)
