"""The benchmarks' honesty on a shared machine (issue #38): other processes' CPU time measured
from /proc (probes/bench/load.py), claims held only when the ratio's interval excludes 1, no
pin_memory claim measured without CUDA, the ``of ceiling`` column net of other processes' load,
a verdict withheld on a busy machine, and partial files marked partial."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

from probes.bench import commands, load, output
from probes.bench.grid import LoaderConfig
from probes.bench.measure import Result, Run


def _result(workers, *rates, pin=False, others=None, host=2):
    config = LoaderConfig(workers, pin, 32, 2, False, "fork")
    runs = [
        Run(
            0.1,
            rate,
            1.0,
            100,
            1.0,
            None,
            None,
            None,
            None,
            False,
            False,
            others_cpus=others,
            host_cpus=host,
            wall_s=5.0,
        )
        for rate in rates
    ]
    return Result(config, runs)


# --- /proc ------------------------------------------------------------------------------------


def test_machine_cpu_time_counts_busy_modes_and_cpus(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text(
        "cpu  100 20 30 5000 400 5 6 7 50 0\ncpu0 50 10 15 2500 200 2 3 3 25 0\ncpu1 50 10 15 2500 200 3 3 4 25 0\n"
        "intr 1 2 3\n"
    )
    busy, cpus = load.machine_cpu_s(str(stat))
    assert cpus == 2
    assert abs(busy - (100 + 20 + 30 + 5 + 6 + 7) / load._TICK) < 1e-9  # idle, iowait and guest (in user) left out
    assert load.machine_cpu_s(str(tmp_path / "absent")) == (None, load.machine_cpu_s(str(tmp_path / "x"))[1])


def test_own_cpu_time_includes_the_children_waited_for():
    # A run's child (and the DataLoader workers it joined) must count as the run's own, never as
    # "other processes": their CPU joins cutime/cstime once waited for.
    before = load.own_cpu_s()
    subprocess.run(
        [sys.executable, "-c", "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"],
        check=True,
        timeout=60,
    )
    after = load.own_cpu_s()
    assert before is not None and after is not None and after - before >= 0.5


def test_a_busy_process_beside_the_measurement_counts_as_other():
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        meter = load.LoadMeter()
        end = load.time.monotonic() + 1.5
        while load.time.monotonic() < end:
            load.time.sleep(0.05)
        got = meter.stop()
    finally:
        spin.kill()
        spin.wait(10)
    assert got is not None and got.host_cpus >= 1 and got.wall_s >= 1.4
    assert got.others_cpus >= 0.2, got  # the spinning process had a CPU share, however loaded the machine


def test_busy_line_says_how_many_cpus_others_used_and_what_it_does_to_the_verdict():
    assert load.busy_line(load.Load(0.05, 2, 10.0)).startswith(
        "the machine was quiet: other processes used 0.05 of 2 CPUs during the run"
    )
    busy = load.busy_line(load.Load(0.6, 2, 10.0))
    assert (
        busy.startswith("the machine was busy: other processes used 0.60 of 2 CPUs during the run")
        and "widened" in busy
    )
    assert "withheld" in load.busy_line(load.Load(1.5, 2, 10.0))
    assert "not measured" in load.busy_line(None)
    assert load.busy_line(load.Load(1.5, 2, 10.0), verdict=False).endswith("(75% of them)")  # no verdict to withhold
    assert load.widening(None, 2) == 1.0 and load.widening(0.1, 2) == 1.0  # quiet: as measured
    assert abs(load.widening(0.5, 2) - 4 / 3) < 1e-9 and load.widening(1.9, 2) == 2.0  # capped at the withhold share


# --- claims -----------------------------------------------------------------------------------


def test_a_claim_holds_only_when_the_ratios_interval_excludes_one():
    # Issue #38: "HELD (1.23x)" in one run, "DID NOT HOLD (1.00x)" in the next. Paired rounds
    # whose ratios straddle 1 cannot tell, whatever the medians' ratio.
    zero, more = _result(0, 800, 1700, 3500), _result(2, 1000, 2000, 3000)
    mid, lo, hi = commands.ratio_interval(more, zero)
    assert lo < 1 < hi and mid > 1.05
    (claim, *_) = commands.claim_verdicts(zero, more, None, cuda=False, torch_version="2.x")
    assert claim["held"] is None and claim["verdict"].startswith("CANNOT TELL")
    # every round faster: held, even though the machine drifted (the medians' ranges overlap)
    zero, more = _result(0, 500, 1000, 2000), _result(2, 700, 1300, 2600)
    assert commands.claim_verdicts(zero, more, None, False, "2.x")[0]["held"] is True
    assert commands.claim_verdicts(more, zero, None, False, "2.x")[0]["held"] is False


def test_a_busy_machine_widens_a_single_runs_claim():
    quiet = commands.claim_verdicts(_result(0, 1000), _result(2, 1100), None, False, "2.x")[0]
    assert quiet["held"] is True  # 10 % apart, one run each, nothing else running
    busy = commands.claim_verdicts(_result(0, 1000, others=0.8), _result(2, 1100, others=0.8), None, False, "2.x")[0]
    assert busy["held"] is None  # others held 0.8 of 2 CPUs: either run could have been 1.67x faster
    withheld = commands.claim_verdicts(_result(0, 1000), _result(2, 3000), None, False, "2.x", withheld="busy")[0]
    assert withheld["held"] is None and withheld["verdict"].startswith("WITHHELD")


def test_pin_memory_claims_are_not_measured_without_cuda():
    zero, more = _result(0, 1000, 1010, 1005), _result(2, 1200, 1210, 1205)
    claims = {c["claim"]: c for c in commands.claim_verdicts(zero, more, None, False, "2.x")}
    for name in ("pin_memory=True is fastest", "pin_memory matters without CUDA"):
        assert claims[name]["held"] is None and claims[name]["verdict"].startswith("not measured: no CUDA device")
    assert [c.pin_memory for c in commands._seed_check_configs(32, cuda=False)] == [False, False]
    pinned = _result(2, 1500, 1510, 1505, pin=True)
    with_cuda = {c["claim"]: c for c in commands.claim_verdicts(zero, more, pinned, True, "2.x")}
    assert with_cuda["pin_memory=True is fastest"]["held"] is True
    assert with_cuda["pin_memory matters without CUDA"]["verdict"] == "not measured: this machine has CUDA"


# --- the table and the recommendation ---------------------------------------------------------


def test_of_ceiling_does_not_count_other_processes_load_as_the_loaders():
    # Ceiling: 2 usable CPUs / 1 ms of CPU a sample = 2000 samples/s. Other processes held one of
    # the 2 CPUs during the runs, and the loader reached 1000: all the free CPU could give.
    r = _result(2, 1000, 1000, 1000, others=1.0)
    for run in r.runs:
        run.steady_cpu_s, run.steady_samples = 0.1, 100
    ceilings = output.ceiling([r], 2.0, cpu_bound=True)
    assert ceilings == {2: 2000.0}
    assert abs(output.of_ceiling(r, ceilings) - 1.0) < 1e-9
    row = output.table([r], ceilings).splitlines()[2]
    assert " 100% " in row and "50%" not in row
    assert "other processes left free" in output.ceiling_text([r], 2.0, ceilings)


def test_a_busy_machine_withholds_the_recommendation():
    w1, w2 = _result(1, 500, 520, 510, others=1.2), _result(2, 900, 950, 920, others=1.2)
    choice = output.choose([w1, w2], cuda=False)
    assert choice.withheld and choice.text().startswith("best: withheld: the machine was busy")
    doc = output.document([w1, w2], {"usable_cpus": 2}, {}, {}, [], choice)
    assert doc["best"] is None and doc["verdict_withheld"] and abs(doc["machine_load"]["others_cpus"] - 1.2) < 1e-9
    assert not output.choose([w1, w2], cuda=False, withhold_share=1.0).withheld  # --busy-limit 1: never
    assert output.choose([w1, w2], cuda=False, withhold_share=1.0).pick is w2


def test_partial_files_are_marked_partial(tmp_path):
    r = _result(2, 900, 950)
    doc = output.document([r], {"usable_cpus": 2}, {}, {}, [], partial="stopped by SIGTERM")
    assert doc["partial"] == "stopped by SIGTERM"
    output.write_csv(str(tmp_path / "p.csv"), doc)
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert len(rows) == 2 and {row["partial"] for row in rows} == {"stopped by SIGTERM"}
    output.write_csv(str(tmp_path / "e.csv"), {"machine": {}, "results": [], "partial": "x"})
    assert (tmp_path / "e.csv").read_text().strip() == "partial"
    output.write_json(str(tmp_path / "p.json"), doc)
    assert json.loads((tmp_path / "p.json").read_text())["partial"] == "stopped by SIGTERM"
