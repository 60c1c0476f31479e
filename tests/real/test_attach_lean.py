"""``dlwatch attach`` without the inside view, on a job whose workers move and then stop
(NOTE [ Thread reads ] in watchdog/collect/read_plan.py): while a worker moved between the last
two full samples, the ticks between full samples are lean (the tick log says so), and the hang
that follows is still found and reported: a worker sleeping on the batch main waits for.
Bounded; every process group started is killed."""

from __future__ import annotations

import os

from tests.real.helpers import DLWATCH, PY, kill_tree, load_report, reports, start, wait_for

# Two workers, 10 ms of CPU a sample, for 20 s or more; then the worker that loads sample STOP_AT
# writes the marker and sleeps for an hour: main waits for its batch, the other worker idles.
JOB = """
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

MARKER, STOP_AT = sys.argv[1], int(sys.argv[2])


class Busy(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if i == STOP_AT:
            with open(MARKER, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(3600)
        end = time.thread_time() + 0.01
        while time.thread_time() < end:
            pass
        return torch.tensor(float(i))


for batch in DataLoader(Busy(), batch_size=4, num_workers=2):
    time.sleep(0.02)
"""
STOP_AT = 4 * 1000  # 4,000 samples of 10 ms of CPU on two workers: 20 s or more of batches


def test_attach_without_the_hook_is_lean_while_workers_move_and_still_reports_the_hang(tmp_path, short_tmp_path):
    script, marker, log = tmp_path / "job.py", short_tmp_path / "marker", tmp_path / "ticks.log"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLWATCH_") and k != "PYTHONPATH"}
    job = start([PY, str(script), str(marker), str(STOP_AT)], env=env)
    watcher = None
    try:
        wait_for(lambda: job.poll() is not None or os.path.exists(f"/proc/{job.pid}"), 10, "the job")
        cmd = DLWATCH + ["attach", "--pid", str(job.pid), "--stall-timeout", "10", "--report-dir", str(tmp_path / "r")]
        watcher = start(cmd, env={**env, "DLWATCH_TICK_LOG": str(log)})
        wait_for(lambda: marker.exists() or job.poll() is not None, 180, "the sleeping worker")
        assert job.poll() is None, job.communicate(timeout=30)
        wait_for(lambda: reports(str(tmp_path / "r")) or watcher.poll() is not None, 150, "the hang's report")
        (folder,) = reports(str(tmp_path / "r"))
        doc = load_report(folder)
        assert doc["job"]["pid"] == job.pid
        assert doc["stall_s"] >= 10, doc["stall_s"]
        kill_tree(watcher)  # the tick log is flushed every second
        kinds = [line.split()[5] for line in log.read_text().splitlines()]
        # while the workers moved, most ticks were lean (a full one at least every 5 s)
        assert kinds.count("lean") >= 8, " ".join(kinds)
    finally:
        kill_tree(job)
        if watcher is not None:
            kill_tree(watcher)
