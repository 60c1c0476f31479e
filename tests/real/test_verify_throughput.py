"""``dlwatch verify`` on an ``input_bound`` warning, on real jobs (NOTE [ Throughput A/B ]):
``probes.cases.input_bound_cpu_few_workers`` (one CPU-bound worker) runs under ``dlwatch run``
until it is warned about; ``verify`` then runs it without and with the warning's change
(``num_workers=2``, applied by the job's recorder), alternating, each run ended after its
batches, and must show the gain with an interval above 1. The step-bound job
(``probes.cases.healthy_step_bound``) given more workers must get no gain claimed.

The gain can show only where the job can get more CPU: on a machine that other sessions keep
busy (Linux's autogroup shares the CPUs between sessions, whatever the job's worker count),
verify says the machine was busy and withholds its verdict, and this test then checks exactly
that. Every process is bounded (``helpers.run_bounded``, ``kill_tree``)."""

from __future__ import annotations

import json
import os

import pytest

from tests.real.helpers import (
    DLWATCH,
    PY,
    ROOT,
    input_bound_warning,
    load_report,
    run_bounded,
)


def _warning_of(case: str, expected_fix: dict, base) -> str:
    """The ``input_bound`` warning of ``probes.cases.<case>`` (:func:`input_bound_warning`),
    its fix checked; its folder."""
    folder = input_bound_warning(case, base)
    first = load_report(folder)["diagnoses"][0]
    assert first["remedy_apply"] == {"loader": expected_fix}, first
    return folder


@pytest.fixture(scope="module")
def warned(tmp_path_factory):
    """The warning of ``input_bound_cpu_few_workers``: one CPU-bound worker, ``num_workers=2``."""
    return _warning_of("input_bound_cpu_few_workers", {"num_workers": 2}, tmp_path_factory.mktemp("cpu"))


def _verify(folder: str, *args: str, timeout_s: float = 420):
    return run_bounded(DLWATCH + ["verify", folder, *args], timeout_s=timeout_s, cwd=ROOT)


def test_a_dry_run_plans_alternating_runs_bounded_by_batches_past_a_warmup(warned):
    code, out, err = _verify(warned, "--dry-run", "--runs", "2", "--batches", "30", timeout_s=60)
    assert code == 0, (out, err[-2000:])
    lines = [line for line in out.splitlines() if line.startswith(("unchanged ", "fixed "))]
    assert [line.split(":")[0] for line in lines] == ["unchanged 1", "fixed 1", "unchanged 2", "fixed 2"]
    assert all("--stop-after-batches 40 --stop-after-s " in line for line in lines)  # 10 of warm-up + 30
    assert all("DLWATCH_APPLY" not in line for line in lines[::2])
    assert all('"num_workers":2' in line for line in lines[1::2])
    assert "fix: num_workers=2" in out


@pytest.mark.timeout(900)
def test_the_warnings_change_is_proven_by_a_measured_speedup_whose_interval_excludes_1(warned, tmp_path):
    out_json = tmp_path / "verify.json"
    code, out, err = _verify(warned, "--runs", "4", "--batches", "40", "--json", str(out_json), timeout_s=800)
    assert code in (0, 1), (out, err[-3000:])
    doc = json.loads(out_json.read_text())
    speed = doc["throughput"]
    runs = doc["runs"]
    assert [r["variant"] for r in runs] == ["unchanged", "fixed"] * 4
    assert all(r["applied"] is True for r in runs[1::2]), runs  # the recorder saw num_workers=2
    assert all(r["outcome"] == "passed" for r in runs), [(r["outcome"], r["error"]) for r in runs]
    assert all(r["others_cpus"] is not None and r["host_cpus"] for r in runs)
    assert "the machine was " in out and speed["load"] in out
    assert speed["pairs"] == 4 and speed["method"].startswith("Student t-interval")
    if speed["state"] == "withheld":  # other sessions held the CPUs: nothing is claimed, and it says why
        assert code == 1 and "make it permanent" not in out
        assert speed["others_cpus"] / speed["host_cpus"] >= 0.5
        pytest.skip(f"the machine was too busy to show the gain, as verify said: {speed['line']}")
    if speed["state"] == "noise" and (speed["others_cpus"] or 0) / (speed["host_cpus"] or 1) >= 0.1:
        # others held a tenth of the CPUs or more: the interval was widened and held 1 (with
        # autogroup, a second CPU-bound worker may get no CPU of its own): nothing is claimed
        assert code == 1 and "make it permanent" not in out and not doc["holds"]
        pytest.skip(f"the machine was busy and the interval held 1, as verify said: {speed['line']}")
    assert code == 0, (speed, out)
    assert speed["state"] == "gain" and speed["low"] > 1.0 and speed["ratio"] > speed["low"], speed
    assert doc["holds"] and doc["change"].startswith("DataLoader(..., num_workers=2) for the loader iterated at ")
    assert "the change speeds the job up: with num_workers=2 it ran " in out
    assert "make it permanent: DataLoader(..., num_workers=2)" in out
    assert os.path.isfile(os.path.join(warned, "verify.json"))  # beside the report, as for a hang


@pytest.mark.timeout(600)
def test_a_step_bound_job_given_more_workers_gets_no_gain_claimed(warned, tmp_path):
    out_json = tmp_path / "verify.json"
    code, out, err = _verify(
        warned,
        "--only",
        "--fix",
        "num_workers=4",
        "--all-loaders",
        "--runs",
        "3",
        "--batches",
        "40",
        "--json",
        str(out_json),
        "--",
        PY,
        "-m",
        "probes.cases.healthy_step_bound",
        "600",
        timeout_s=500,
    )
    assert code == 1, (out, err[-3000:])
    doc = json.loads(out_json.read_text())
    assert all(r["applied"] is True for r in doc["runs"][1::2]), doc["runs"]
    speed = doc["throughput"]
    assert speed["state"] in ("noise", "slower", "withheld"), speed
    assert not doc["holds"] and doc["change"] is None and "make it permanent" not in out
    assert "the change speeds the job up" not in out


@pytest.mark.timeout(900)
def test_io_bound_workers_given_the_warnings_workers_gain_whatever_the_machines_load(tmp_path):
    # Workers that wait on their reads (a 50 ms sleep a sample) need no CPU to go faster: the
    # gain shows even while other sessions hold the CPUs (--busy-limit 1: judged anyway). With
    # --ladder on two CPUs the report's 4 workers are the only rung (doubling passes the CPUs).
    folder = _warning_of("input_bound_io_workers", {"num_workers": 4}, tmp_path)
    out_json = tmp_path / "verify.json"
    args = ("--runs", "4", "--batches", "60", "--busy-limit", "1", "--ladder", "--json", str(out_json))
    code, out, err = _verify(folder, *args, timeout_s=800)
    doc = json.loads(out_json.read_text())
    speed = doc["throughput"]
    assert code == 0, (speed, out[-3000:], err[-2000:])
    assert [r["variant"] for r in doc["runs"]] == ["unchanged", "fixed"] * 4
    assert all(r["applied"] is True for r in doc["runs"][1::2]), doc["runs"]
    assert speed["state"] == "gain" and speed["low"] > 1.0 and speed["pairs"] == 4, speed
    assert "the machine was " in out and "make it permanent: DataLoader(..., num_workers=" in out
    usable = len(os.sched_getaffinity(0))
    if usable < 8:  # one rung: 4, then 8 would pass the usable CPUs
        assert len(doc["rungs"]) == 1 and "the ladder: num_workers=4 is the last that gained (1 rung(s))" in out
        assert "make it permanent: DataLoader(..., num_workers=4)" in out
        assert os.path.isdir(os.path.join(doc["folder"], "rung-1", "fixed-4"))


def test_a_warning_of_another_kind_is_still_refused(tmp_path):
    folder = tmp_path / "20261205T000000Z-1-warning-cpu_oversubscribed"
    folder.mkdir(mode=0o700)
    (folder / "report.json").write_text(json.dumps({"mode": "live", "diagnoses": [{"kind": "cpu_oversubscribed"}]}))
    os.chmod(folder / "report.json", 0o600)
    code, out, err = _verify(str(folder), timeout_s=60)
    # only input_bound's change is proven by throughput (the message names it: the old one did not)
    assert (
        code == 2 and "a live report: verify proves the fix of a hang or a crash, or the change an input_bound" in err
    ), (
        out,
        err,
    )
