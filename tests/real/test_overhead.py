"""``dlwatch probe overhead`` for real, in a small version (1 + 2 processes, one pair of 5 s
runs, one hang): every figure is present and sane. How small the figures are belongs to the
benchmark itself (README "Overhead"), not here. The probe runs in a session of its own, and every
process group it started is killed at the end, whatever happens."""

from __future__ import annotations

import json
import math

import pytest

from tests.real.helpers import DLWATCH, run_bounded


@pytest.mark.timeout(300)
def test_overhead_probe_reports_every_figure(tmp_path):
    out_json = tmp_path / "overhead.json"
    code, out, err = run_bounded(
        DLWATCH
        + [
            "probe",
            "overhead",
            "--workers",
            "2",
            "--pairs",
            "1",
            "--seconds",
            "5",
            "--warmup",
            "3",
            "--churn",
            "15",
            "--json",
            str(out_json),
        ],
        timeout_s=330,
    )
    assert code == 0, err
    assert "1 + 2" in out and "detect→report" in out
    doc = json.loads(out_json.read_text())
    (result,) = doc["results"]
    assert result["workers"] == 2 and result["processes"] == 3 and result["pairs"] == 1
    assert 0 < result["cpu_fraction"] < 1 and 0 < result["cpu_fraction_per_process"] < 1
    assert result["tick_p99_ms"] >= result["tick_p50_ms"] > 0
    assert result["peak_rss_bytes"] > 0
    assert 0 < result["first_tick_cpu_s"] <= result["startup_cpu_s"] < 60
    assert (
        result["throughput_ratio"] > 0
        and result["throughput_ratio_min"] <= result["throughput_ratio"] <= result["throughput_ratio_max"]
    )
    assert result["plain_batches_per_s"] > 0 and result["watched_batches_per_s"] > 0
    assert 0 < result["detect_to_report_s"] < 120
    (hang,) = doc["hangs"]
    assert hang["kind"] == "fork_inherited_lock" and hang["processes"] == 3
    assert len(doc["runs"]) == 2 and {r["watched"] for r in doc["runs"]} == {False, True}
    churn = doc["churn"]  # workers recreated about every second, the inside view on
    assert churn["epochs"] >= 5 and churn["ticks"] >= 5 and churn["tick_cpu_ms_last"] > 0
    # The token, main's two files, the live workers' two each; an ended worker's go at the next
    # tick, so those of the generations that ended since the last tick may remain (a generation
    # every 0.3 s here under load: 3 of them in a 1 s tick). Without the retiring, hundreds remain.
    per_tick = math.ceil(churn["epochs"] / churn["seconds"] * churn["interval_s"])
    assert churn["hook_files"] <= 1 + 2 + 2 * 2 * (1 + per_tick), churn
    assert "churn: " in out


@pytest.mark.timeout(400)
def test_overhead_probe_measures_a_node_under_run_and_attach(tmp_path):
    # the node job (#36 §2): torchrun ranks reading .npy files, persistent workers, a DDP
    # all-reduce a step; watched by dlwatch run and by dlwatch attach, each in its own run
    out_json = tmp_path / "node.json"
    code, out, err = run_bounded(
        DLWATCH
        + ["probe", "overhead", "--node", "--ranks", "2", "--workers", "1", "--mode", "both", "--watched-only"]
        + ["--pairs", "1", "--seconds", "4", "--warmup", "3", "--json", str(out_json)],
        timeout_s=390,
    )
    assert code == 0, err
    assert "2 x (1 + 1), node, run" in out and "2 x (1 + 1), node " in out
    doc = json.loads(out_json.read_text())
    by_mode = {r["mode"]: r for r in doc["results"]}
    assert set(by_mode) == {"run", "attach"}
    for result in by_mode.values():
        assert result["node"] and result["processes"] == 4 and result["pairs"] == 1, result
        assert 0 < result["cpu_fraction_min"] <= result["cpu_fraction"] <= result["cpu_fraction_max"] < 1
        assert result["tick_p99_ms"] >= result["tick_p50_ms"] > 0
        assert result["watched_batches_per_s"] > 0
        assert result["throughput_ratio"] is None and result["plain_batches_per_s"] is None  # --watched-only
    runs = doc["runs"]
    assert len(runs) == 2 and all(r["watched"] and r["node"] for r in runs)
    assert {r["mode"] for r in runs} == {"run", "attach"} and all(r["ticks"] >= 2 for r in runs)
    assert {r["mode"]: r["inside"] for r in runs} == {"run": True, "attach": False}  # run: with the inside view


def test_overhead_probe_refuses_bad_flags_in_one_line():
    code, _out, err = run_bounded(DLWATCH + ["probe", "overhead", "--workers", "0,x"], timeout_s=60)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--workers" in err
