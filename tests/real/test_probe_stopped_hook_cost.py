"""``dlwatch probe hook-cost`` stopped part-way (issue #38, "Probes that report as they go"): by
SIGTERM or SIGINT in a run with the recorder, it kills that run with its workers, removes the
recorder's private folder, and prints and writes (``--json``) the rounds it finished, marked
partial, as ``bench`` does (tests/real/test_probe_stopped.py). Before, SIGTERM's default action
ended it with nothing written and the folder left in TMPDIR. Real probe, real signals; each test
kills the process group it started."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from tests.real.helpers import DLWATCH, kill_tree, start, wait_for


def _text(path):
    return path.read_text() if path.exists() else ""


def _hook_folders(tmp):
    """The recorder's folders under ``tmp`` (the probe's private TMPDIR is inside it)."""
    return [d for d, _, _ in os.walk(tmp) if os.path.basename(d).startswith("dlwatch-hook-")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_hook_cost_stopped_in_a_hooked_run_writes_its_finished_rounds_and_leaves_nothing(short_tmp_path, sig):
    tmp = short_tmp_path / "tmp"
    tmp.mkdir()
    err, out, js = short_tmp_path / "err", short_tmp_path / "out", short_tmp_path / "cost.json"
    args = ["probe", "hook-cost", "--loaders", "in-process,typical", "--rounds", "3", "--json", str(js)]
    proc = start(
        DLWATCH + args,
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=out.open("w"),
        stderr=err.open("w"),
    )
    try:
        wait_for(lambda: "hook-cost: in-process: round 1/3: " in _text(err), 150, "the first round's figures")
        # Round 2 starts with the recorder: its private folder and its job exist.
        wait_for(lambda: _hook_folders(tmp), 60, "the recorder's folder")
        job = wait_for(
            lambda: [p for p in psutil.Process(proc.pid).children(recursive=True) if "-c" in p.cmdline()],
            30,
            "the hooked run's job",
        )
        proc.send_signal(sig)  # as `timeout` or Ctrl-C does: to the probe alone
        assert proc.wait(timeout=60) == 128 + sig, _text(err)
        assert os.listdir(tmp) == [], os.listdir(tmp)  # the recorder's folder went with the run
        _, alive = psutil.wait_procs(job, timeout=10)
        assert not alive, alive  # the run in progress was ended with it
    finally:
        kill_tree(proc)
    name = signal.Signals(sig).name
    doc = json.loads(js.read_text())
    assert doc["partial"] == f"stopped by {name}", doc
    (first,) = doc["results"]  # the typical loader never started
    assert first["loader"] == "in-process" and first["partial"] == f"stopped by {name}", first
    assert 1 <= first["rounds"] < 3 and first["plain_batches_per_s"] > 0 and first["hooked_batches_per_s"] > 0
    printed = _text(out)
    assert f"partial: stopped by {name}: the {first['rounds']} round(s) finished so far follow" in printed, printed
    assert "in-process (partial)" in printed
    assert f"dlwatch: interrupted ({name}); the run in progress was stopped" in _text(err)
