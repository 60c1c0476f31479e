"""The sweep of stderr-tail folders left by killed runs: only folders nobody holds."""

from __future__ import annotations

import fcntl
import os
import time

from watchdog.collect.stderr_tail import sweep_stale


def test_only_unowned_folders_are_swept(tmp_path):
    dead = tmp_path / "dlwatch-stderr-dead"
    live = tmp_path / "dlwatch-stderr-live"
    young = tmp_path / "dlwatch-stderr-young"
    old = tmp_path / "dlwatch-stderr-old"
    other = tmp_path / "something-else"
    for d in (dead, live, young, old, other):
        d.mkdir()
    (dead / "lock").write_bytes(b"")
    (live / "lock").write_bytes(b"")
    hours_ago = time.time() - 7200
    os.utime(old, (hours_ago, hours_ago))
    fd = os.open(live / "lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert sweep_stale(str(tmp_path)) == 2
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dlwatch-stderr-live",
        "dlwatch-stderr-young",
        "something-else",
    ]
