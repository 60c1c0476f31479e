"""``on_hang: terminate`` ends a job only on a proof (issue #34): a hang that is only suspected
is reported and left running however long no batch comes (``busy_stall_timeout_s`` only
examines and reports it); a proven one is ended, and its report and ``outcome.json`` say it
was proven. The healthy twins that were ended at the old busy-stall ceiling (a lock holder that
writes for minutes, a first batch that builds an index for minutes) are cases in
``probes/cases/`` (``healthy_lock_holder_writes``, ``healthy_long_first_batch`` and their
``_opt_in`` runs), run by tests/real/test_cases.py; every report a real test reads is held to
carry its proof when it ended a job (``tests.real.helpers.check_termination_proof``).

Every job here runs in its own session, bounded, and is killed whatever happens."""

from __future__ import annotations

import json
import os
import time

from tests.real.helpers import (
    DLWATCH,
    PY,
    TERMINATE_AFTER_4_S,
    TRAIN,
    kill_tree,
    load_report,
    reports,
    run_bounded,
    start,
    wait_for,
)


def test_a_suspected_hang_outlasting_the_busy_stall_ceiling_is_reported_and_never_ended(tmp_path):
    # A worker asleep for an hour in __getitem__: a timed wait, never a proof. The old contract
    # ended it at busy_stall_timeout_s (8 s here); now it runs on until we end it ourselves.
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("busy_stall_timeout_s: 8\n")
    report_dir = str(tmp_path / "r")
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err, open(tmp_path / "stdout", "w") as out:
        proc = start(
            DLWATCH
            + ["run", "--config", str(cfg), *TERMINATE_AFTER_4_S, "--report-dir", report_dir, "--"]
            + TRAIN
            + ["--fault", "worker-sleep", "--num-workers", "2", "--batch-size", "300", "--samples", "300"],
            stdout=out,
            stderr=err,
        )
    try:
        (folder,) = wait_for(lambda: reports(report_dir), 90, "the suspected hang's report")
        first_seen = time.monotonic()
        # Well past the ceiling (8 s) and its re-examination (every stall_timeout_s, 4 s).
        while time.monotonic() - first_seen < 20:
            assert proc.poll() is None, "the job was ended without a proof: " + err_path.read_text()
            time.sleep(0.5)
        docs = [load_report(f) for f in reports(report_dir)]
        assert all(d["action"] == "report" for d in docs), [d["action_note"] for d in docs]
        assert docs[0]["stall"]["certainty"] == "suspected"
        assert "ends a job only on a proof" in docs[0]["action_note"], docs[0]["action_note"]
        assert not os.path.exists(os.path.join(folder, "outcome.json"))  # still open: nothing ended it
    finally:
        kill_tree(proc)


def test_a_proven_hang_is_ended_and_its_outcome_says_proven(tmp_path):
    report_dir = str(tmp_path / "r")
    code, _out, err = run_bounded(
        DLWATCH
        + [
            "run",
            *TERMINATE_AFTER_4_S,
            "--report-dir",
            report_dir,
            "--",
            PY,
            "-m",
            "probes.cases.thread_pool_before_fork",
        ],
        120,
    )
    assert code == 124, err  # dlwatch ended it
    folder = next(f for f in reports(report_dir) if load_report(f)["mode"] == "hang")
    doc = load_report(folder)
    assert doc["action"] == "terminate" and doc["stall"]["certainty"] == "proven", doc["action_note"]
    with open(os.path.join(folder, "outcome.json"), encoding="utf-8") as f:
        outcome = json.load(f)
    assert outcome["outcome"] == "terminated" and outcome["certainty"] == "proven", outcome
    assert outcome["reason"].startswith("proven"), outcome
    assert "on_hang=terminate (proven" in err, err
