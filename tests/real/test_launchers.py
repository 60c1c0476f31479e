"""Ranks as launchers set them, under ``dlwatch run``: a script that starts itself again for its
local rank 1 with ``LOCAL_RANK``/``NODE_RANK``/``WORLD_SIZE`` and no ``RANK`` (what PyTorch
Lightning's ``strategy="ddp"`` does; no Lightning needed), and two tasks with ``SLURM_PROCID``
and the other variables ``srun`` sets, started by a small launcher in the order opposite to
their ranks. Each process runs a small DataLoader; rank 1's blocks. Each rank must be labelled
as its launcher numbered it: the log's ``watching rank …`` lines, the metrics' rank labels,
the hang report's folder and ``job.rank``; and the report of a rank gets its ``outcome.json``
when the job ends after the hang. Every run is bounded and every process group it starts is
killed (:func:`run_bounded`, :func:`kill_tree`)."""

from __future__ import annotations

import json
import os
import socket
import textwrap
import time
import urllib.request

import pytest

from tests.real.helpers import DLWATCH, PY, kill_tree, load_report, reports, start

JOB = textwrap.dedent(
    """
    import os, subprocess, sys, threading, time
    import psutil, torch
    from torch.utils.data import DataLoader, Dataset

    STUCK = 1
    REPORTS = os.environ["TEST_REPORTS"]
    DONE = os.environ["TEST_DONE"]

    def my_rank():
        if "SLURM_PROCID" in os.environ:
            return int(os.environ["SLURM_PROCID"])
        return int(os.environ.get("NODE_RANK", "0")) * 2 + int(os.environ.get("LOCAL_RANK", "0"))

    class Data(Dataset):
        def __init__(self, rank):
            self.rank = rank
        def __len__(self):
            return 100000
        def __getitem__(self, i):
            if self.rank == STUCK and i >= 16:
                threading.Event().wait()  # this rank's worker blocks for good
            return torch.ones(2)

    def leave_after_report(rank):
        # the job ends after the hang: once this rank's report is written, it and its worker go
        while not any(f"rank{rank}" in name for name in os.listdir(REPORTS) if os.path.isdir(REPORTS)):
            time.sleep(0.2)
        time.sleep(1)
        for child in psutil.Process().children(recursive=True):
            child.kill()
        os._exit(3)

    def train(done):
        rank = my_rank()
        if rank == STUCK and os.environ.get("TEST_LEAVE") == "1":
            threading.Thread(target=leave_after_report, args=(rank,), daemon=True).start()
        deadline = time.monotonic() + 120
        for _ in DataLoader(Data(rank), batch_size=2, num_workers=1):
            time.sleep(0.05)
            if done() or time.monotonic() > deadline:
                break
        print(f"rank {rank} done", flush=True)

    mode = sys.argv[1]
    if mode == "relaunch":  # as Lightning's _SubprocessScriptLauncher
        if "LOCAL_RANK" not in os.environ:
            env = {**os.environ, "LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}
            child = subprocess.Popen([sys.executable, os.path.abspath(__file__), mode], env=env)
            os.environ.update(LOCAL_RANK="0", NODE_RANK="0", WORLD_SIZE="2")  # not in /proc/PID/environ
            train(lambda: child.poll() is not None)
            sys.exit(child.wait() and 3)
        train(lambda: False)
    elif mode == "srun":  # srun's part: one task per rank, started in no particular order
        tasks = {}
        for rank in (1, 0):
            env = {
                **os.environ,
                "SLURM_JOB_ID": "4242",
                "SLURM_STEP_ID": "0",
                "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank),
                "SLURM_NODEID": "0",
                "SLURM_NTASKS": "2",
                "SLURM_STEP_NUM_TASKS": "2",
            }
            tasks[rank] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "task"], env=env)
            time.sleep(0.5)
        code = tasks[1].wait()
        open(DONE, "w").close()
        tasks[0].wait()
        sys.exit(3 if code else 0)
    else:  # a task srun started
        train(lambda: os.path.exists(DONE))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_labels(port: int) -> set:
    """``{(rank, local_rank, group_rank)}`` of the ``dlwatch_seconds_since_progress`` series
    served now (empty when the endpoint does not answer yet)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return set()
    return {
        (s.labels["rank"], s.labels["local_rank"], s.labels["group_rank"])
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "dlwatch_seconds_since_progress"
    }


def _run(tmp_path, mode: str, args, leave: bool = False, timeout_s: float = 170):
    """Run the job in ``mode`` under ``dlwatch run`` with a metrics port; returns ``(exit code,
    stdout, stderr, rank labels seen in the metrics while both ranks were watched)``."""
    script = tmp_path / "train.py"
    script.write_text(JOB)
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    env = {
        **os.environ,
        "TEST_REPORTS": str(report_dir),
        "TEST_DONE": str(tmp_path / "done"),
        "TEST_LEAVE": "1" if leave else "0",
    }
    for name in [k for k in env if k.startswith(("SLURM_", "OMPI_")) or k in ("RANK", "LOCAL_RANK", "NODE_RANK")]:
        del env[name]  # the test's own environment names no rank
    port = _free_port()
    cmd = DLWATCH + ["run", "--metrics-port", str(port), "--report-dir", str(report_dir)] + args
    proc = start(cmd + ["--", PY, str(script), mode], env=env)
    try:
        labels: set = set()
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline and len(labels) < 2:
            labels = _rank_labels(port)
            time.sleep(0.5)
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        return proc.returncode, out, err, labels
    finally:
        kill_tree(proc)


@pytest.mark.timeout(240)
def test_a_script_that_starts_itself_again_as_lightning_does_has_each_rank_labelled_right(tmp_path):
    args = ["--stall-timeout", "6", "--on-hang", "terminate", "--terminate-grace", "3"]
    code, out, err, labels = _run(tmp_path, "relaunch", args)
    assert "rank 0 of 2" in err and "rank 1 of 2" in err, err[-3000:]
    assert "rank 0 of 1" not in err and "rank main" not in err, err[-3000:]
    # rank, local_rank, group_rank (NODE_RANK) as the launcher set them
    assert labels == {("0", "0", "0"), ("1", "1", "0")}, labels
    found = reports(str(tmp_path / "reports"))
    assert len(found) == 1 and found[0].endswith("-rank1"), (found, err[-3000:])
    doc = load_report(found[0])
    assert doc["job"]["rank"]["RANK"] == "1" and doc["job"]["rank"]["LOCAL_RANK"] == "1", doc["job"]["rank"]
    assert doc["job"]["rank"]["WORLD_SIZE"] == "2" and "Lightning" in doc["job"]["rank"]["RANK_SOURCE"]


@pytest.mark.timeout(240)
def test_srun_tasks_are_ranked_by_slurm_procid_and_a_rank_report_gets_its_outcome_when_the_job_ends(tmp_path):
    code, out, err, labels = _run(tmp_path, "srun", ["--stall-timeout", "6"], leave=True)
    assert "rank 0 done" in out, (out, err[-3000:])
    assert "rank 0 of 2" in err and "rank 1 of 2" in err and "SLURM_PROCID" in err, err[-3000:]
    assert labels == {("0", "0", "0"), ("1", "1", "0")}, labels
    found = reports(str(tmp_path / "reports"))
    assert len(found) == 1 and found[0].endswith("-rank1"), (found, err[-3000:])
    doc = load_report(found[0])
    assert doc["job"]["rank"]["RANK"] == "1" and doc["job"]["rank"]["WORLD_SIZE"] == "2", doc["job"]["rank"]
    # rank 1 left after its hang was reported, then the job ended: the report says so
    with open(os.path.join(found[0], "outcome.json"), encoding="utf-8") as f:
        outcome = json.load(f)
    assert outcome["outcome"] == "job_ended" and outcome["exit_code"] == code, outcome


HELPER = textwrap.dedent(
    """
    import multiprocessing, time, torch
    from torch.utils.data import DataLoader

    def evaluate():
        for _ in range(3):
            for _ in DataLoader(range(40), batch_size=2, num_workers=1):
                time.sleep(0.05)

    if __name__ == "__main__":
        helper = multiprocessing.get_context("spawn").Process(target=evaluate)
        helper.start()
        helper.join()
        print("helper done", flush=True)
    """
)


@pytest.mark.timeout(180)
def test_a_helper_process_the_job_starts_with_multiprocessing_is_no_rank_0_of_1(tmp_path):
    script = tmp_path / "helper.py"
    script.write_text(HELPER)
    cmd = DLWATCH + ["run", "--report-dir", str(tmp_path / "reports"), "--stall-timeout", "60", "--", PY, str(script)]
    proc = start(cmd)
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0 and "helper done" in out, err[-3000:]
    assert "rank 0 of 1" not in err, err[-3000:]
    assert "watching process" in err and "multiprocessing" in err, err[-3000:]
