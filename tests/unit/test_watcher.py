"""The watch loop's public face, on this test process itself (nothing is started): what
other threads read of a watcher (:meth:`Watcher.status`), and the roles and examination
switch a job-level watcher sets (:meth:`Watcher.set_roles`)."""

from __future__ import annotations

import os
import threading

from watchdog import config
from watchdog.daemon import Watcher, WatcherStatus
from watchdog.types import ROLE_LAUNCHER
from watchdog.wake import Waker


def _watcher(**kw) -> Watcher:
    return Watcher(config.Config(), os.getpid(), None, lambda: False, Waker(), **kw)


def test_the_status_is_a_frozen_snapshot_replaced_at_each_tick():
    w = _watcher(rank={"RANK": "3", "WORLD_SIZE": "4"})
    before = w.status()
    vars_ = (("RANK", "3"), ("WORLD_SIZE", "4"))
    assert before == WatcherStatus(rank="3", root_pid=os.getpid(), rank_vars=vars_) and before.sample is None
    w.step()
    after = w.status()
    assert after is not before and after.sample is not None and after.sample.main is not None
    assert after.sample.main.pid == os.getpid() and after.rank == "3" and after.last_hang_kind == ""
    assert before.sample is None  # what another thread held is never changed under it


def test_roles_set_from_outside_name_processes_in_the_next_sample_and_examination_can_be_turned_off():
    w = _watcher()
    w.set_roles({os.getpid(): ROLE_LAUNCHER}, examine=False)
    w.step()
    main = w.status().sample.main
    assert main is not None and main.role is ROLE_LAUNCHER and not w.examine


def test_a_watchers_own_loop_ends_when_stopped_from_another_thread():
    w = _watcher()
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    w.stop.set()
    w.wake.set()
    t.join(10.0)
    assert not t.is_alive()


def test_a_hang_that_resolved_just_before_the_job_ended_is_recorded_resolved(tmp_path):
    import json

    from watchdog import detect

    w = _watcher()
    folder = tmp_path / "report"
    folder.mkdir()
    w.hangs.open = [str(folder)]  # a suspected hang reported; then a batch came, said at the next tick
    w.hangs.resolved = (detect.Reported(1.0, False, False, ("worker_stuck", "data.py:9"), 100.0), 112.0)
    w.after_exit(0)
    became = json.loads((folder / "outcome.json").read_text())
    assert became["outcome"] == "resolved" and became["resolved_after_s"] == 12.0 and became["exit_code"] == 0
    assert "then the job ended with exit code 0" in became["summary"]


def test_a_hang_still_open_when_the_job_ended_says_how_it_ended_once(tmp_path):
    import json
    import signal

    w = _watcher()
    folder = tmp_path / "report"
    folder.mkdir()
    w.hangs.open = [str(folder)]
    w.after_exit(None, signalled=signal.SIGTERM)
    became = json.loads((folder / "outcome.json").read_text())
    assert became["outcome"] == "job_ended" and "after the SIGTERM dlwatch forwarded to it" in became["summary"]
    assert w.hangs.open == [] and w.hangs.resolved is None  # written once: nothing left open
