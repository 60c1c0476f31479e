"""Probes stopped part-way (issue #38, "Probes that report as they go"): ``rhythm`` says what it
runs as it goes and, stopped by SIGTERM, ends its job and removes its private folders;
``bench`` and ``autotune`` stopped by SIGTERM or SIGINT write what they measured, marked
partial. Real probes, real signals; each test kills the process group it started."""

from __future__ import annotations

import csv
import json
import os
import signal

import psutil

from tests.real.helpers import DLWATCH, kill_tree, start, wait_for

TINY = ["--samples", "240", "--sample-shape", "3,32,32", "--batch-size", "16", "--cpu-ms", "3"]


def _text(path):
    return path.read_text() if path.exists() else ""


def _start(args, tmp, err_path, out_path):
    env = {**os.environ, "TMPDIR": str(tmp)}
    return start(DLWATCH + ["probe", *args], env=env, stdout=out_path.open("w"), stderr=err_path.open("w"))


def test_rhythm_says_what_it_runs_and_leaves_nothing_when_stopped(short_tmp_path):
    tmp = short_tmp_path / "tmp"
    tmp.mkdir()
    err, out, js = short_tmp_path / "err", short_tmp_path / "out", short_tmp_path / "rows.json"
    proc = _start(["rhythm", "fast, 2 workers", "--rounds", "3", "--json", str(js)], tmp, err, out)
    try:
        # Progress before the first run ends (it printed nothing for 10 minutes before).
        wait_for(lambda: "rhythm: [1/3] round 1: fast, 2 workers" in _text(err), 60, "the first progress line")
        wait_for(lambda: "rhythm: [1/3] fast, 2 workers: " in _text(err), 60, "the first run's figures")
        # The second run is under way: its job and the recorder's folder exist.
        wait_for(lambda: "rhythm: [2/3]" in _text(err), 30, "the second run")
        job = wait_for(
            lambda: [
                p for p in psutil.Process(proc.pid).children(recursive=True) if "probes.train" in " ".join(p.cmdline())
            ],
            30,
            "the second run's job",
        )
        private = [n for n in os.listdir(tmp) if n.startswith("dlwatch-probe-")]
        assert private, os.listdir(tmp)
        proc.send_signal(signal.SIGTERM)  # as `timeout` does: to the probe alone
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM, _text(err)
        assert os.listdir(tmp) == [], os.listdir(tmp)  # its TMPDIR, with the recorder's folder in it
        gone, alive = psutil.wait_procs(job, timeout=10)
        assert not alive, alive  # the job it ran was ended with it
        doc = json.loads(js.read_text())
        assert doc["partial"] == "stopped by SIGTERM" and doc["rows"] and doc["rows"][0]["round"] == 1
        assert "partial: stopped by SIGTERM" in _text(out)
    finally:
        kill_tree(proc)


def test_bench_stopped_by_sigterm_writes_the_runs_it_finished(short_tmp_path):
    tmp = short_tmp_path / "tmp"
    tmp.mkdir()
    err, out = short_tmp_path / "err", short_tmp_path / "out"
    js, cs = short_tmp_path / "b.json", short_tmp_path / "b.csv"
    args = ["bench", "--num-workers", "0,1", "--pin-memory", "false", *TINY, "--repeats", "5"]
    proc = _start(args + ["--json", str(js), "--csv", str(cs)], tmp, err, out)
    try:
        wait_for(lambda: "bench: run 2/10" in _text(err), 90, "two finished runs")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM, _text(err)
    finally:
        kill_tree(proc)
    doc = json.loads(js.read_text())
    assert doc["partial"] == "stopped by SIGTERM" and doc["best"] is None and doc["verdict_withheld"], doc
    runs = sum(len(r["runs"]) for r in doc["results"])
    assert 2 <= runs < 10
    rows = list(csv.DictReader(cs.open()))
    assert len(rows) == runs and {r["partial"] for r in rows} == {"stopped by SIGTERM"}
    assert "partial: stopped by SIGTERM" in _text(out) and "best: withheld: the measurement stopped early" in _text(out)
    assert os.listdir(tmp) == []


def test_autotune_stopped_by_sigint_writes_what_it_measured(short_tmp_path):
    tmp = short_tmp_path / "tmp"
    tmp.mkdir()
    err, out, js = short_tmp_path / "err", short_tmp_path / "out", short_tmp_path / "a.json"
    args = ["autotune", "--num-workers", "0,1,2", "--pin-memory", "false", *TINY, "--repeats", "3"]
    proc = _start(args + ["--json", str(js)], tmp, err, out)
    try:
        # The second measurement starts once the first configuration's runs are in.
        wait_for(lambda: _text(err).count("autotune: measuring") >= 2, 120, "the first configuration measured")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 128 + signal.SIGINT, _text(err)
    finally:
        kill_tree(proc)
    doc = json.loads(js.read_text())
    assert doc["partial"] == "stopped by SIGINT" and doc["results"], doc
    assert all(r["runs"] for r in doc["results"])
    assert os.listdir(tmp) == []
