"""``dlwatch dump --pid N``: the stacks of a real job's main process and every DataLoader
worker now, from py-spy, as text and JSON; given a worker's pid it dumps that worker's job;
a pid that cannot be watched is one line and exit code 2. Every job is killed with its group."""

from __future__ import annotations

import json
import subprocess
import textwrap

import psutil

from tests.real.helpers import DLWATCH, PY, kill_tree, start, wait_for

JOB = textwrap.dedent(
    """
    import os, threading, torch
    from torch.utils.data import DataLoader, Dataset

    class Waiting(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            threading.Event().wait()  # each worker waits here
            return torch.ones(2)

    if __name__ == "__main__":
        print("pid", os.getpid(), flush=True)
        for _ in DataLoader(Waiting(), batch_size=4, num_workers=2):
            pass
    """
)


def _workers(pid):
    return [c.pid for c in psutil.Process(pid).children() if c.name() == "pt_data_worker"]


def _dump(*args):
    return subprocess.run(DLWATCH + ["dump", *args], capture_output=True, text=True, timeout=90)


def test_dump_shows_main_and_every_worker_with_its_frames_and_kernel_wait(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = start([PY, str(script)])
    try:
        wait_for(lambda: proc.stdout.readline().startswith("pid"), 60, "the job to start")
        workers = wait_for(lambda: _workers(proc.pid) if len(_workers(proc.pid)) == 2 else None, 60, "two workers")
        done = _dump("--pid", str(proc.pid))
        assert done.returncode == 0, done.stderr
        assert f"pid {proc.pid} (main" in done.stdout
        for pid in workers:
            assert f"pid {pid} (dataloader_worker" in done.stdout, done.stdout
        assert done.stdout.count("Waiting.__getitem__ (") == 2 and "[kernel: state S" in done.stdout
        as_json = _dump("--pid", str(workers[0]), "--json")  # a worker's pid: its job is dumped
        assert as_json.returncode == 0 and f"is a DataLoader worker of pid {proc.pid}" in as_json.stderr
        doc = json.loads(as_json.stdout)
        assert {p["pid"] for p in doc["processes"]} == {proc.pid, *workers}
        assert all(p["stack"]["threads"] for p in doc["processes"])
    finally:
        kill_tree(proc)
    gone = _dump("--pid", str(proc.pid))
    assert gone.returncode == 2 and len(gone.stderr.strip().splitlines()) == 1 and str(proc.pid) in gone.stderr
