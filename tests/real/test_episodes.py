"""One episode, one report: a real job whose samples are slower than the stall timeout (each
sleeps 8 s, the stall timeout is 5 s) is reported once as suspected, told when that stall
resolves, and not reported again at every sample; a hang whose workers die while main lingers
is not said to resolve. Bounded, and every process group it starts
is killed (``run_bounded``)."""

from __future__ import annotations

import json
import os

from tests.real.helpers import DLWATCH, PY, load_report, reports, run_bounded

SLOW_SAMPLES = """
import time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(8)  # a remote fetch slower than the stall timeout
        return torch.tensor(float(i))

for step, batch in enumerate(DataLoader(Slow(), batch_size=1, num_workers=1)):
    print("step", step, flush=True)
print("done", flush=True)
"""


def test_a_job_slower_than_the_stall_timeout_is_reported_once_and_its_stall_said_to_resolve(tmp_path):
    cmd = DLWATCH + ["run", "--stall-timeout", "5", "--report-dir", str(tmp_path), "--", PY, "-c", SLOW_SAMPLES]
    code, out, err = run_bounded(cmd, timeout_s=150)
    assert code == 0 and "done" in out, err
    hangs = [d for d in map(load_report, reports(str(tmp_path))) if d["mode"] == "hang"]
    assert len(hangs) == 1, [d["diagnoses"][0]["summary"] for d in hangs]
    assert hangs[0]["stall"]["certainty"] == "suspected" and hangs[0]["stall"]["measure"] == "batches"
    assert "resolved after" in err and "came back after it resolved by itself" in err, err
    # The report's folder says what became of it, and the listing shows it.
    (folder,) = [f for f in reports(str(tmp_path)) if load_report(f)["mode"] == "hang"]
    with open(os.path.join(folder, "outcome.json"), encoding="utf-8") as f:
        became = json.load(f)
    assert became["outcome"] == "resolved" and became["resolved_after_s"] > 0, became
    assert oct(os.stat(os.path.join(folder, "outcome.json")).st_mode & 0o777) == "0o600"
    code, listing, err = run_bounded(DLWATCH + ["reports", str(tmp_path)], 60)
    assert code == 0 and "resolved after" in listing and "OUTCOME" in listing, listing + err
    code, shown, err = run_bounded(DLWATCH + ["show", folder], 60)
    lines = shown.splitlines()
    outcome = next((i for i, line in enumerate(lines) if line.lstrip().startswith("outcome: ")), None)
    cause = next((i for i, line in enumerate(lines) if line.lstrip().startswith("cause: ")), len(lines))
    assert code == 0 and outcome is not None and outcome < cause, shown  # under the (wrapped) headline
    assert lines[outcome].lstrip().startswith("outcome: resolved after"), shown


WORKER_KILLED_WHILE_MAIN_LINGERS = """
import os, signal, time
import torch
from torch.utils.data import DataLoader, Dataset

class Stuck(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        time.sleep(12)  # past the stall timeout: reported as a suspected hang
        os.kill(os.getpid(), signal.SIGKILL)  # then the worker dies instead of delivering

try:
    for batch in DataLoader(Stuck(), batch_size=1, num_workers=2):
        print("batch", flush=True)
except RuntimeError:
    time.sleep(4)  # main works and lingers after its loader failed
    raise
"""


def test_a_hang_whose_workers_die_while_main_lingers_is_not_said_to_resolve(tmp_path):
    cmd = DLWATCH + ["run", "--stall-timeout", "5", "--report-dir", str(tmp_path), "--", PY, "-c"]
    code, out, err = run_bounded(cmd + [WORKER_KILLED_WHILE_MAIN_LINGERS], timeout_s=150)
    assert code == 1, err
    assert "resolved after" not in err, err
    (folder,) = [f for f in reports(str(tmp_path)) if load_report(f)["mode"] == "hang"]
    with open(os.path.join(folder, "outcome.json"), encoding="utf-8") as f:
        became = json.load(f)
    assert became["outcome"] == "job_ended" and became["exit_code"] == 1, became
    assert "exit code 1" in became["summary"], became
