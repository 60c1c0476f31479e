"""Is the job input-bound? (issue #38) Where a user sees the verdict on a real running job:
``dlwatch status --pid`` prints it, the metrics endpoint serves the workers' time by state and
the verdict, and without the recorder the verdict says it needs the inside view instead of
guessing. The verdicts themselves, case by case, are checked by ``tests/real/test_cases.py``
(``probes/cases/input_bound_*.py``, ``healthy_step_bound.py``). Bounded; every process group
started is killed."""

from __future__ import annotations

import json
import os
import subprocess

import psutil

from tests.real.helpers import DLWATCH, PY, ROOT, kill_tree, start, wait_for
from tests.real.test_dashboard_series import _free_port, _scrape

IO_JOB = [PY, "-m", "probes.cases.input_bound_io_workers", "150"]


def _job_pid(proc: subprocess.Popen, module: str) -> int:
    """The pid of the job ``dlwatch run`` (``proc``) started: its child running ``module``."""

    def found():
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
            running = {k.pid: k.ppid() for k in kids if module in k.cmdline()}
        except psutil.Error:
            return None
        mains = [pid for pid, ppid in running.items() if ppid not in running]  # not a worker of one
        return mains[0] if len(mains) == 1 else None

    return wait_for(found, 60, f"the job {module}")


def _status(pid: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        DLWATCH + ["status", "--pid", str(pid), *args], capture_output=True, text=True, timeout=90, cwd=ROOT
    )


def test_status_and_metrics_name_an_io_bound_jobs_verdict_and_its_workers_time(tmp_path):
    cfg = tmp_path / "dlwatch.yaml"
    cfg.write_text("warning_interval_s: 2\n")
    port = _free_port()
    cmd = DLWATCH + ["run", "--config", str(cfg), "--metrics-port", str(port), "--report-dir", str(tmp_path / "r")]
    proc = start(cmd + ["--"] + IO_JOB, cwd=ROOT)
    try:
        pid = _job_pid(proc, "probes.cases.input_bound_io_workers")

        def verdict():
            got = _scrape(port)
            named = {ls["verdict"] for ls, v in got.get("dlwatch_input_verdict", ()) if v == 1}
            return got if "workers_io_bound" in named else None

        got = wait_for(verdict, 150, "the io-bound verdict in the metrics", interval_s=1.0)
        seconds: dict = {}
        for labels, value in got["dlwatch_worker_seconds_total"]:
            seconds[labels["state"]] = seconds.get(labels["state"], 0.0) + value
        assert seconds["io"] > 5 * max(seconds["cpu"], 0.1), seconds  # they sleep in the Dataset
        assert {ls["worker_id"] for ls, _ in got["dlwatch_worker_seconds_total"]} == {"0", "1"}

        done = _status(pid, "--window", "4", "--json")
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)["input"]
        assert doc["verdict"] == "workers_io_bound", doc
        assert doc["data_wait_share"] > 0.2 and doc["remedy_apply"] == {"loader": {"num_workers": 4}}, doc
        text = _status(pid, "--window", "4").stdout
        assert "input: input-bound: main waits for data" in text and "num_workers=4" in text, text

        warned = wait_for(
            lambda: [f for f in os.listdir(tmp_path / "r") if f.endswith("warning-input_bound")],
            60,
            "the input_bound warning's report",
        )
        assert len(warned) == 1
    finally:
        kill_tree(proc)


def test_without_the_recorder_the_verdict_says_it_needs_the_inside_view(tmp_path):
    job = start(IO_JOB[:-1] + ["60"], cwd=ROOT)  # plain python: no recorder in it
    try:
        wait_for(lambda: len(psutil.Process(job.pid).children()) >= 2, 60, "the job's workers")
        done = _status(job.pid, "--window", "2")
        assert done.returncode == 0, done.stderr
        (line,) = [x for x in done.stdout.splitlines() if x.startswith("input: ")]
        assert "it needs the inside view" in line and "dlwatch run" in line, done.stdout
        assert "input-bound:" not in done.stdout
    finally:
        kill_tree(job)
