"""``dlwatch verify`` on the ``input_bound`` warnings of three more cases (issue #38, NOTE
[ Throughput A/B ]), each run under ``dlwatch run`` until it is warned about, then verified on
the warning alone (the report's own command and fix):

- ``probes.cases.input_bound_oversubscribed_blas``: four workers, each with NumPy's OpenBLAS
  threads spinning for the CPUs; the warning's fix sets ``OMP_NUM_THREADS=1`` (and the BLAS
  libraries' own variables, all in verify's ``REPORT_ENV_NAMES``).
- ``probes.cases.input_bound_oversubscribed``: four workers whose ``worker_init_fn`` raises
  their intra-op threads to 4 (``torch.set_num_threads(4)``, which no variable overrides); the
  warning's fix adds ``worker_threads=1``, ``torch.set_num_threads(1)`` after that function in
  each worker, applied by the job's recorder.
- ``probes.cases.input_bound_epoch_starts``: short epochs whose workers start again each epoch
  (``worker_init_fn`` sleeps 1.5 s); the warning's fix is ``persistent_workers=True``, applied by
  the job's recorder.

Each A/B must show a gain whose interval excludes 1. The BLAS threads' gain needs CPUs: where
other sessions kept the machine busy, verify says so (its own "the machine was busy" line) and
withholds or widens its verdict; the test then checks that nothing was claimed and skips, as
the CPU-bound test does (tests/real/test_verify_throughput.py). The epoch starts' gain is a
wait saved (the workers' start sleeps), so it is judged whatever the load (``--busy-limit 1``),
as the I/O-bound case is there. Every process is bounded (``run_bounded``,
``kill_tree``)."""

from __future__ import annotations

import json
import os

import pytest

from tests.real.helpers import (
    DLWATCH,
    ROOT,
    input_bound_warning,
    load_report,
    run_bounded,
)

# Measured batches a run: a run's progress is noted every second or two, so a run must last
# several seconds past its warm-up (with 40, a fast run's warm-up and end fell in one note and
# the run went unmeasured). The epoch-start case's runs go at up to 50 batches/s (main's 20 ms
# step): 300 give six seconds or more; the BLAS case's with the change at up to 200 (a 5 ms
# step): 1,000.
BATCHES = 300
BLAS_BATCHES = 1000
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _warning(case: str, base) -> dict:
    """The ``input_bound`` warning of ``probes.cases.<case>`` (:func:`input_bound_warning`):
    ``{"folder": its folder, "first": its first diagnosis}``."""
    folder = input_bound_warning(case, base)
    return {"folder": folder, "first": load_report(folder)["diagnoses"][0]}


def _proven(folder: str, tmp_path, change: str, pairs: int, batches: int, anyway: bool = False) -> dict:
    """``dlwatch verify`` on ``folder`` with ``pairs`` pairs of runs of ``batches`` measured
    batches each (800 s at most); checks what holds whatever the machine's load, then either
    the gain (interval above 1) or, where verify said the machine was busy, that nothing was
    claimed (the test is skipped then). With ``anyway`` (a change whose gain needs no CPU),
    ``--busy-limit 1``: judged whatever the load, and the gain must show. Returns
    ``verify.json``'s ``throughput``."""
    out_json = tmp_path / "verify.json"
    args = ["--runs", str(pairs), "--batches", str(batches), "--json", str(out_json)]
    args += ["--busy-limit", "1"] if anyway else []
    code, out, err = run_bounded(DLWATCH + ["verify", folder, *args], timeout_s=800, cwd=ROOT)
    assert code in (0, 1), (out, err[-3000:])
    doc = json.loads(out_json.read_text())
    speed, runs = doc["throughput"], doc["runs"]
    assert [r["variant"] for r in runs] == ["unchanged", "fixed"] * pairs
    assert all(r["outcome"] == "passed" for r in runs), [(r["outcome"], r["error"]) for r in runs]
    assert all(r["applied"] is not False for r in runs), runs
    assert all(r["others_cpus"] is not None and r["host_cpus"] for r in runs)
    assert "the machine was " in out and speed["load"] in out
    rates = [(r["variant"], r["batches"], r["progress"][-3:]) for r in runs]
    assert speed["pairs"] == pairs and speed["method"].startswith("Student t-interval"), (speed, rates)
    busy = (speed["others_cpus"] or 0) / (speed["host_cpus"] or 1)
    figures = f"{speed['ratio']}x ({speed['low']}-{speed['high']}x), others {busy:.0%} of the CPUs"
    print(f"verify {os.path.basename(folder)}: {speed['state']} {figures}")
    if not anyway and (speed["state"] == "withheld" or (speed["state"] == "noise" and busy >= 0.1)):
        # others held the CPUs: verify said so, withheld or widened its interval, claimed nothing
        assert "the machine was busy" in out, out
        assert code == 1 and not doc["holds"] and doc["change"] is None and "make it permanent" not in out
        pytest.skip(f"the machine was too busy to show the gain, as verify said: {speed['line']}")
    assert code == 0, (speed, out[-3000:])
    assert speed["state"] == "gain" and speed["low"] > 1.0 and speed["ratio"] > speed["low"], speed
    assert doc["holds"] and f"the change speeds the job up: with {change} it ran " in out, out[-3000:]
    assert "make it permanent: " in out
    return speed


@pytest.mark.timeout(1100)
@pytest.mark.parametrize(
    "case, batches",
    [
        # NumPy's OpenBLAS threads in each worker: the variables do it
        ("input_bound_oversubscribed_blas", BLAS_BATCHES),
        # torch.set_num_threads(4) in the job's worker_init_fn, which no variable overrides: the
        # fix's torch.set_num_threads(1) after that function, in each worker, does
        ("input_bound_oversubscribed", BATCHES),
    ],
)
def test_oversubscribed_workers_gain_from_the_warnings_one_thread_each(case, batches, tmp_path):
    warned = _warning(case, tmp_path)
    first = warned["first"]
    assert "CPU oversubscribed" in first["summary"], first["summary"]
    assert first["remedy_apply"] == {"env": THREADS, "worker_threads": 1}, first
    change = "OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, MKL_NUM_THREADS=1, torch.set_num_threads(1) in each worker"
    _proven(warned["folder"], tmp_path, change, pairs=4, batches=batches)


@pytest.mark.timeout(1100)
def test_epoch_starts_gain_from_the_warnings_persistent_workers(tmp_path):
    warned = _warning("input_bound_epoch_starts", tmp_path)
    first = warned["first"]
    assert "epoch starts dominate" in first["summary"], first["summary"]
    assert first["remedy_apply"] == {"loader": {"persistent_workers": True}}, first
    # The workers' start is a sleep (a store's connection): the gain needs no CPU and shows
    # whatever the machine's load (judged anyway, as the I/O-bound case in test_verify_throughput).
    speed = _proven(warned["folder"], tmp_path, "persistent_workers=True", pairs=4, batches=BATCHES, anyway=True)
    assert speed["ratio"] > 1.5, speed  # 1.5 s of worker start each epoch of 16 batches, without it
