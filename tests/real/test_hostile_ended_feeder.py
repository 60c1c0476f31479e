"""A job whose unrelated ``multiprocessing`` helper fails (a metrics uploader that exits 1) while
its DataLoader workers compute long samples on a CPU must not be reported as hung: the busy
workers are working, not spinning on what the helper was to feed (detect.ended_feeder, issue #34
"waits on the dead"). The rule takes any multiprocessing process of the job that ended badly
since the stall began as the reason busy workers are not working on a sample, whatever the
workers' stacks show; it holds only when a worker's stack shows the spin (inside ``get_nowait``,
or a non-blocking get at or above its frame in the job's source: ``Evidence.non_blocking_gets``),
not a computation.

The job is bounded (about 40 s) and killed whatever happens."""

from __future__ import annotations

from tests.real.helpers import DLWATCH, PY, TERMINATE_AFTER_4_S, kill_tree, load_report, reports, start

JOB = """
import multiprocessing as mp, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

def uploader():
    time.sleep(2)
    sys.exit(1)  # an unrelated helper (a metrics uploader) fails

class D(Dataset):
    def __len__(self):
        return 6
    def __getitem__(self, i):
        t, x = time.monotonic(), 0
        while time.monotonic() - t < 12:  # a long, real computation on a CPU
            x += 1
        return torch.tensor(float(i))

if __name__ == "__main__":
    mp.get_context("fork").Process(target=uploader, name="uploader").start()
    for step, b in enumerate(DataLoader(D(), batch_size=1, num_workers=2)):
        print("step", step, flush=True)
"""


def test_a_failed_unrelated_helper_does_not_make_computing_workers_a_hang(short_tmp_path):
    job = short_tmp_path / "job.py"
    job.write_text(JOB)
    report_dir = str(short_tmp_path / "r")
    proc = start(DLWATCH + ["run", *TERMINATE_AFTER_4_S, "--report-dir", report_dir, "--", PY, str(job)])
    try:
        out, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, err[-3000:]
        assert "step 5" in out
        hangs = [d for d in (load_report(f) for f in reports(report_dir)) if d["mode"] == "hang"]
        assert not hangs, [d["diagnoses"][0]["remedy"][:300] for d in hangs]
    finally:
        kill_tree(proc)
