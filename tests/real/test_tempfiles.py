"""`dlwatch run` leaves nothing in the temporary directory: not after a job that cannot be
started (126/127), not after it ended a hung job (124), not when a process that outlives the
job keeps its stderr open. Each run gets its own TMPDIR so that the check is about this run."""

from __future__ import annotations

import os
import sys

from .helpers import DLWATCH, TERMINATE_AFTER_4_S, TRAIN, run_bounded, wait_for


def _ours(tmp: str):
    return sorted(n for n in os.listdir(tmp) if n.startswith("dlwatch-"))


def _env(tmp) -> dict:
    return dict(os.environ, TMPDIR=str(tmp))


def test_a_job_that_cannot_start_leaves_no_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code, _, err = run_bounded(DLWATCH + ["run", "--", "no-such-command-dlwatch"], 60, env=_env(tmp))
    assert code == 127, err
    assert _ours(str(tmp)) == []
    code, _, err = run_bounded(DLWATCH + ["run", "--", "/etc/passwd"], 60, env=_env(tmp))
    assert code == 126, err
    assert _ours(str(tmp)) == []


def test_a_terminated_run_leaves_no_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = [*TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path / "r")]
    code, _, err = run_bounded(
        DLWATCH + ["run", *args, "--"] + TRAIN + ["--fault", "fork-lock", "--num-workers", "2"], 150, env=_env(tmp)
    )
    assert code == 124, err
    assert _ours(str(tmp)) == []


def test_a_process_holding_stderr_past_the_end_leaves_no_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    job = [
        sys.executable,
        "-c",
        "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(2)'], "
        "start_new_session=True)",
    ]
    code, _, err = run_bounded(DLWATCH + ["run", "--no-hook", "--"] + job, 60, env=_env(tmp))
    assert code == 0, err
    # The pump outlives dlwatch while the orphan holds the pipe; it removes its folder at the end.
    wait_for(lambda: _ours(str(tmp)) == [], 20, "the stderr pump's folder to go")


def test_folders_of_killed_runs_are_swept_by_the_next_run(tmp_path):
    tmp = tmp_path / "tmp"
    stale = tmp / "dlwatch-stderr-killed"
    stale.mkdir(parents=True)
    (stale / "lock").write_bytes(b"")  # nobody holds its flock: both owners were killed
    (stale / "tail").write_bytes(b"x")
    code, _, err = run_bounded(DLWATCH + ["run", "--no-hook", "--", sys.executable, "-c", "pass"], 60, env=_env(tmp))
    assert code == 0, err
    assert _ours(str(tmp)) == []
