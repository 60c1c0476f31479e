"""Alert hooks (:mod:`watchdog.watch.alert`): the command runs through ``/bin/sh`` with the report's
variables, and what the job's text holds (a NUL in its exception message) never stops it or
the thread that runs it."""

from __future__ import annotations

import time

from watchdog.watch.alert import Alerts


def test_a_nul_in_a_report_variable_reaches_the_command_escaped(tmp_path):
    out = tmp_path / "seen"
    said = []
    alerts = Alerts({"on_hang_exec": f'printf %s "$DLWATCH_SUMMARY" > {out}'}, 10.0, said.append)
    alerts.fire("hang", {"DLWATCH_SUMMARY": "ValueError: bad\0byte"})
    alerts.wait(10.0)
    assert out.read_text() == "ValueError: bad\\x00byte" and not said


def test_a_command_that_cannot_run_is_one_line_and_changes_nothing(tmp_path):
    said = []
    alerts = Alerts({"on_crash_exec": "echo a\0b"}, 10.0, said.append)
    alerts.fire("crash", {"DLWATCH_KIND": "worker_killed"})
    alerts.wait(10.0)
    assert len(said) == 1 and said[0].startswith("on_crash_exec could not run:"), said
    alerts.fire("hang", {})  # no on_hang_exec: nothing runs
    alerts.wait(1.0)
    assert len(said) == 1


def test_a_command_past_exec_timeout_is_killed_with_its_children(tmp_path):
    import psutil

    pidfile = tmp_path / "child"
    said = []
    alerts = Alerts({"on_hang_exec": f"sleep 60 & echo $! > {pidfile}; wait"}, 1.0, said.append)
    alerts.fire("hang", {})
    alerts.wait(20.0)
    child = int(pidfile.read_text())
    try:
        assert len(said) == 1 and "ran longer than exec_timeout_s (1 s) and was killed" in said[0], said
        deadline = time.monotonic() + 10
        while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the command's child outlived its kill"
            time.sleep(0.05)
    finally:
        try:
            if psutil.Process(child).name() == "sleep":
                psutil.Process(child).kill()
        except psutil.Error:
            pass
