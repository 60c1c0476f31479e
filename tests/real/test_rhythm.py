"""The batch-rhythm stall rule (NOTE [ Batch rhythm ] in watchdog/detect/progress.py) on real jobs: a
fast loader that deadlocks is reported long before stall_timeout_s, and a slow, irregular,
healthy loader is never reported."""

from __future__ import annotations

import datetime as dt
import textwrap

from tests.real.helpers import DLWATCH, PY, load_report, reports, run_bounded

FAST_THEN_DEADLOCK = textwrap.dedent(
    """
    import threading, time, torch
    from torch.utils.data import DataLoader, Dataset

    lock = threading.Lock()

    class Frames(Dataset):
        def __len__(self):
            return 100000
        def __getitem__(self, i):
            if i >= 400:          # 100 fast batches, then the lock every worker inherited locked
                with lock:
                    pass
            return torch.zeros(8)

    held = threading.Event()
    def holder():
        with lock:
            held.set()
            threading.Event().wait()
    threading.Thread(target=holder, name="lock-holder", daemon=True).start()
    held.wait()
    for batch in DataLoader(Frames(), batch_size=4, num_workers=2):
        time.sleep(0.002)
        print(f"batch t={time.time():.3f}", flush=True)
    """
)

SLOW_IRREGULAR = textwrap.dedent(
    """
    import time, torch
    from torch.utils.data import DataLoader, Dataset

    class Remote(Dataset):
        def __len__(self):
            return 26
        def __getitem__(self, i):
            time.sleep(1.0 if i % 3 else 2.0)   # a slow object store: 1-2 s per sample
            return torch.zeros(8)

    n = sum(1 for _ in DataLoader(Remote(), batch_size=1, num_workers=1))
    print(f"done {n}", flush=True)
    """
)


def _run(tmp_path, script_text, args, timeout_s):
    script = tmp_path / "job.py"
    script.write_text(script_text)
    return run_bounded(
        DLWATCH + ["run", "--report-dir", str(tmp_path / "reports")] + args + ["--", PY, str(script)], timeout_s
    )


def test_a_fast_loader_that_deadlocks_is_reported_in_about_ten_seconds_at_the_defaults(tmp_path):
    code, out, err = _run(
        tmp_path, FAST_THEN_DEADLOCK, ["--on-hang", "terminate", "--terminate-grace", "2"], timeout_s=90
    )
    assert code == 124, err
    (folder,) = reports(str(tmp_path / "reports"))
    doc = load_report(folder)
    assert doc["stall"]["trigger"] == "batch_rhythm" and doc["stall"]["certainty"] == "proven", doc["stall"]
    assert "batch rhythm" in doc["stall"]["rule"] and "stall_min_s 10 s" in doc["stall"]["rule"]
    last_batch = max(float(line.rsplit("t=", 1)[1]) for line in out.splitlines() if line.startswith("batch t="))
    detected = dt.datetime.fromisoformat(doc["detected_at"].replace("Z", "+00:00")).timestamp()
    assert 9.0 <= detected - last_batch <= 30.0, detected - last_batch  # stall_timeout_s is 60
    (loader,) = doc["inside_view"]["loaders"]
    assert loader["batches"] >= 90 and loader["waiting_worker"] in (0, 1)


def test_a_slow_irregular_healthy_loader_is_never_reported(tmp_path):
    config = tmp_path / "dlwatch.yaml"
    # Scaled down 20x from batches every 30-40 s under the default 60 s: a 3 s timeout, and a
    # rhythm rule that engages (k x p99 below it) so that only its proof requirement protects.
    config.write_text("stall_timeout_s: 3\nstall_min_s: 0.5\nstall_p99_factor: 1.2\ninterval_s: 0.5\n")
    code, out, err = _run(tmp_path, SLOW_IRREGULAR, ["--config", str(config), "--on-hang", "terminate"], timeout_s=120)
    assert code == 0, err
    assert "done 26" in out
    # Performance advice is no false alarm: a loader that sleeps for its data is input-bound.
    found = [f for f in reports(str(tmp_path / "reports")) if not f.endswith("-warning-input_bound")]
    assert found == [], err
