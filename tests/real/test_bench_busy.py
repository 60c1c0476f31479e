"""``dlwatch probe bench`` on a busy machine (issue #38): it measures the CPU time other
processes used during its runs (/proc/stat minus its own and its children's), says so, and
withholds its recommendation at the stated share. Busy loops beside it make the machine busy."""

from __future__ import annotations

import json
import os
import re

from probes.rhythm import busy_loops, stop_busy
from tests.real.helpers import DLWATCH, run_bounded

TINY = ["--samples", "240", "--sample-shape", "3,32,32", "--batch-size", "16", "--cpu-ms", "3"]


def test_bench_says_the_machine_was_busy_and_withholds_its_verdict(tmp_path):
    cpus = os.cpu_count() or 1
    loops = busy_loops(min(cpus, 4))
    try:
        path = tmp_path / "b.json"
        args = ["probe", "bench", "--num-workers", "0,1", "--pin-memory", "false", *TINY, "--repeats", "1"]
        code, out, err = run_bounded(DLWATCH + args + ["--extra-rounds", "0", "--json", str(path)], timeout_s=150)
    finally:
        stop_busy(loops)
    assert code == 0, err[-2000:]
    doc = json.loads(path.read_text())
    load = doc["machine_load"]
    # The busy loops alone kept a CPU's share busy however loaded the machine already was.
    assert load["others_cpus"] >= 0.3 * min(cpus, 4) / 2, load
    m = re.search(
        r"^the machine was (busy|quiet): other processes used ([\d.]+) of (\d+) CPUs during the runs", out, re.M
    )
    assert m and m.group(1) == "busy" and float(m.group(2)) == round(load["others_cpus"], 2), out
    assert all(run["others_cpus"] is not None for r in doc["results"] for run in r["runs"])
    if load["share"] >= 0.5:  # the stated threshold (--busy-limit, default 0.5)
        assert doc["best"] is None and doc["verdict_withheld"] and re.search(r"^best: withheld: ", out, re.M), out
    else:
        assert doc["best"] is not None and not doc["verdict_withheld"], out
