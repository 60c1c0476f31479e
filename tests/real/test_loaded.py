"""On a loaded machine (issue #34, section 4): busy-loop processes started for the test's
duration (killed at its end, whatever happens) beside a healthy job, which dlwatch must not
report. A runnable thread waiting for a CPU is not idle: ``/proc/PID/schedstat``'s run-queue
wait tells it from a thread that sleeps (NOTE [ Run-queue wait ] in watchdog/collect/sampler.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from probes import cases, repro
from probes.rhythm import BUSY_LOOP
from tests.real.helpers import kill_tree, reports, start

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/schedstat"), reason="no /proc/PID/schedstat (kernel without CONFIG_SCHED_INFO)"
)

# Busy processes per usable CPU: load 8 on 2 cores, as the issue asks the tests to hold under.
BUSY_PER_CPU = 4


def _busy_loops(n: int) -> list:
    """``n`` processes that spin on a CPU (each in its own session, killed by the caller; each
    also ends by itself once this test process is gone)."""
    return [start([sys.executable, "-c", BUSY_LOOP], stdout=subprocess.DEVNULL) for _ in range(n)]


def test_a_low_priority_worker_computing_on_a_loaded_machine_is_never_reported(tmp_path):
    # The worker runs at nice 19 beside 4 busy processes per CPU: its CPU share is a fraction
    # of a percent, far under BUSY_SHARE, but it is runnable all along. Before the run-queue
    # wait was read it was reported worker_stuck, "used little CPU: they wait, poll or retry".
    cpus = len(os.sched_getaffinity(0))
    busy = _busy_loops(BUSY_PER_CPU * cpus)
    try:
        case = cases.BY_NAME["healthy_compute_low_priority"]
        outcome = repro.run_scenario(repro.from_case(case), str(tmp_path))
    finally:
        for p in busy:
            kill_tree(p)
    assert outcome.status == "ok" and outcome.exit_code == 0, (outcome.kinds, outcome.note)
    assert reports(os.path.join(str(tmp_path), "reports")) == []
    with open(os.path.join(str(tmp_path), "dlwatch.stderr"), encoding="utf-8", errors="replace") as f:
        said = [line for line in f if line.startswith("dlwatch:") and "not a hang" in line]
    # each 8 s sample is examined at 5 s (and again while it lasts): said once, not at each look
    assert len(said) <= 2, said
