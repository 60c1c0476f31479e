"""The throughput A/B of ``dlwatch verify`` (watchdog/commands/throughput_ab.py, NOTE [
Throughput A/B ]): rates past the warm-up, the t-interval on paired log-ratios, the others' load
that widens or withholds it, and the ``num_workers`` ladder, on recorded numbers; and the
bounded run's progress points (``RunBound``) fed by real samples' counts."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from watchdog.commands import throughput_ab as ab
from watchdog.commands import verify_runs

# Recorded on this project's 2-CPU VM (2026-12-05): batches/s past the warm-up of
# probes.cases.input_bound_cpu_few_workers, num_workers=1 (A) and 2 (B), alternating.
QUIET_A = (7.9, 8.1, 7.6, 8.0, 7.8)
QUIET_B = (14.8, 15.6, 14.1, 15.3, 15.0)
# healthy_step_bound, num_workers=2 (A) and 4 (B): the step is the slow part.
STEP_A = (11.6, 11.9, 11.2, 11.8, 11.5)
STEP_B = (11.7, 11.5, 11.4, 11.9, 11.3)


def _runs(a, b, others=None, host=2):
    out = []
    for i, (x, y) in enumerate(zip(a, b), 1):
        oa, ob = others[i - 1] if others else (None, None)
        out += [ab.Run("A", i, x, oa, host if others else None), ab.Run("B", i, y, ob, host if others else None)]
    return out


def test_t_quantiles_match_the_table_and_its_tail():
    assert ab.t975(1) == 12.706 and ab.t975(4) == 2.776 and ab.t975(30) == 2.042
    assert abs(ab.t975(40) - 2.021) < 0.002 and abs(ab.t975(120) - 1.980) < 0.002
    with pytest.raises(ValueError):
        ab.t975(0)


def test_the_interval_is_students_on_the_mean_log_ratio():
    logs = [math.log(b / a) for a, b in zip(QUIET_A, QUIET_B)]
    iv = ab.interval(logs)
    mean = sum(logs) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 4)
    assert iv is not None and iv.n == 5
    assert iv.ratio == pytest.approx(math.exp(mean))
    assert iv.low == pytest.approx(math.exp(mean - 2.776 * sd / math.sqrt(5)))
    assert iv.high == pytest.approx(math.exp(mean + 2.776 * sd / math.sqrt(5)))
    assert ab.interval(logs[:1]) is None  # one pair says nothing
    wide = ab.interval(logs, 1.5)  # the half-width, in log units, times 1.5
    assert wide is not None and wide.widened_by == 1.5
    assert math.log(wide.high / wide.ratio) == pytest.approx(1.5 * math.log(iv.high / iv.ratio))


def test_a_clear_gain_is_a_gain_and_a_step_bound_job_gains_nothing():
    j = ab.judge(_runs(QUIET_A, QUIET_B), "num_workers=2")
    assert j.state == ab.GAIN and j.holds and j.interval is not None and 1.8 < j.interval.low < j.interval.ratio
    assert j.line.startswith("the change speeds the job up: with num_workers=2 it ran 1.90x the batches/s")
    assert "t-interval on the log-ratios of 5 alternating pairs" in j.line
    flat = ab.judge(_runs(STEP_A, STEP_B), "num_workers=4")
    assert flat.state == ab.NOISE and not flat.holds and flat.interval is not None
    assert flat.interval.low < 1 < flat.interval.high
    assert flat.line.startswith("no gain shown: the interval holds 1")
    slower = ab.judge(_runs(QUIET_B, QUIET_A), "num_workers=1")
    assert slower.state == ab.LOSS and slower.line.startswith("the change slows the job down")


def test_a_gain_inside_the_noise_is_not_claimed():
    # 1.1x on average, but pairs that disagree: the interval holds 1
    a, b = (8.0, 6.0, 9.0, 5.5, 8.5), (7.2, 8.4, 8.1, 7.7, 9.5)
    j = ab.judge(_runs(a, b), "num_workers=2")
    assert j.state == ab.NOISE and j.interval is not None and j.interval.ratio > 1.0


def test_a_busy_machine_is_said_widens_the_interval_and_withholds_at_the_limit():
    assert ab.widening(None) == 1.0 and ab.widening(0.05) == 1.0
    assert ab.widening(0.2) == pytest.approx(1.25) and ab.widening(0.9) == pytest.approx(2.0)  # capped
    quiet = ab.judge(_runs(QUIET_A, QUIET_B, [(0.05, 0.05)] * 5), "num_workers=2")
    assert (
        quiet.load_line == "the machine was quiet: other processes used 0.05 of 2 CPUs on average during the runs (2%)"
    )
    assert quiet.interval is not None and quiet.interval.widened_by == 1.0 and "widened" not in quiet.line
    # others at 0.4 of 2 CPUs (20 %), unevenly: the half-width grows 1.25x
    busy = ab.judge(_runs(QUIET_A, QUIET_B, [(0.2, 0.6), (0.6, 0.2)] * 2 + [(0.4, 0.4)]), "num_workers=2")
    assert busy.load_line.startswith("the machine was busy: other processes used 0.40 of 2 CPUs on average")
    assert (
        busy.load_line.endswith("; the interval is widened 1.25x") and "widened 1.25x for the others' load" in busy.line
    )
    assert busy.interval is not None and quiet.interval is not None
    half = math.log(busy.interval.high / busy.interval.ratio)
    assert half == pytest.approx(1.25 * math.log(quiet.interval.high / quiet.interval.ratio))
    assert busy.interval.low < quiet.interval.low and busy.state == ab.GAIN  # a 1.9x gain survives it
    held = ab.judge(_runs(QUIET_A, QUIET_B, [(1.2, 1.2)] * 5), "num_workers=2")
    assert held.state == ab.WITHHELD and not held.holds and held.line.startswith("withheld: the machine was busy (60%")
    assert "1.90x" in held.line  # the figures are still given
    judged_anyway = ab.judge(_runs(QUIET_A, QUIET_B, [(1.2, 1.2)] * 5), "n", busy_limit=1.0)
    assert judged_anyway.state == ab.GAIN and judged_anyway.interval.widened_by == pytest.approx(2.0)
    # a noisy gain that a quiet machine would call a gain is noise once widened on a busy one
    a, b = (8.0, 7.0, 9.0, 7.5, 8.5), (10.0, 7.6, 10.2, 9.1, 8.9)
    assert ab.judge(_runs(a, b), "n").state == ab.GAIN
    assert ab.judge(_runs(a, b, [(0.8, 0.8)] * 5), "n").state == ab.NOISE


def test_a_run_that_failed_or_did_not_have_the_change_proves_nothing_and_too_few_pairs_say_nothing():
    runs = _runs(QUIET_A, QUIET_B)
    runs[3] = ab.Run("B", 2, None, problem="hung (worker_stuck)")
    j = ab.judge(runs, "num_workers=2")
    assert j.state == ab.CANNOT and j.line == "not proven: run 2 with num_workers=2 hung (worker_stuck)"
    two = ab.judge(_runs(QUIET_A[:1], QUIET_B[:1]), "num_workers=2")
    assert two.state == ab.CANNOT and "1 pair(s) of runs measured past the warm-up (needs 2)" in two.line
    unmeasured = _runs(QUIET_A, QUIET_B)
    unmeasured[1] = ab.Run("B", 1, None)
    left = ab.judge(unmeasured, "num_workers=2")
    assert left.interval.n == 4  # the pair without a rate is left out, and said to be
    assert left.line.endswith(
        "; left out, too short past the warm-up to measure (give more --batches): run 1 with num_workers=2"
    )
    assert "left out" not in ab.judge(_runs(QUIET_A, QUIET_B), "num_workers=2").line


def test_the_rate_is_past_the_warmup_from_the_recorded_points():
    progress = [(1.0, 2), (2.0, 6), (3.0, 10), (4.0, 18), (5.0, 26), (6.0, 34)]
    assert ab.rate_past_warmup(progress, 10) == (24, 3.0)  # from (3.0, 10): 24 batches in 3 s
    assert ab.rate_past_warmup(progress, 0) == (32, 5.0)
    assert ab.rate_past_warmup(progress, 40) is None  # never past the warm-up
    assert ab.rate_past_warmup([(1.0, 10), (1.5, 30)], 10) is None  # under a second measured
    assert ab.rate_past_warmup([], 10) is None
    assert ab.parse_progress([[1.5, 3], ["x", 2], [True, 1], [2, 4, 5], 7]) == ((1.5, 3),)
    assert ab.parse_progress("nope") == ()


def test_the_bound_follows_the_originals_rate_within_its_limits():
    b = ab.bound_for(100, 20.0)  # 5 batches/s
    assert (b.warmup, b.measured, b.batches) == (10, 60, 70) and b.seconds == pytest.approx(3 * 70 / 5 + 30)
    assert ab.bound_for(10, 100.0).measured == ab.MIN_MEASURED and ab.bound_for(10, 100.0).seconds == 600.0
    assert ab.bound_for(100000, 10.0).measured == ab.MAX_MEASURED
    assert ab.bound_for(None, None) == ab.Bound(10, 40, 120.0)
    assert ab.bound_for(100, 20.0, batches=30, seconds=45.0) == ab.Bound(10, 30, 45.0)


def test_the_ladder_doubles_up_to_the_usable_cpus_and_stops_when_the_gain_is_noise():
    assert ab.ladder_candidates(2, 16) == [2, 4, 8, 16]
    assert ab.ladder_candidates(2, 2) == [2]
    assert ab.ladder_candidates(3, 2) == [3]  # the report's own value is always tried
    assert ab.ladder_candidates(3, 13) == [3, 6, 12]
    # recorded rungs of a 16-CPU job: 1 -> 2 gained, 2 -> 4 gained, 4 -> 8 inside the noise
    assert ab.ladder_pick([(2, ab.GAIN)]) == (2, True)
    assert ab.ladder_pick([(2, ab.GAIN), (4, ab.GAIN), (8, ab.NOISE)]) == (4, False)
    assert ab.ladder_pick([(2, ab.NOISE)]) == (None, False)
    assert ab.ladder_pick([(2, ab.GAIN), (4, ab.WITHHELD)]) == (2, False)
    # the judgement of recorded rates drives it
    rung3 = ab.judge(_runs(STEP_A, STEP_B), "num_workers=8").state
    assert ab.ladder_pick([(2, ab.GAIN), (4, ab.GAIN), (8, rung3)]) == (4, False)


def test_the_load_meter_counts_the_runs_own_processes_as_its_own():
    # a child that burns a CPU for 1.5 s is the run's own: others' use stays well below it
    meter = ab.LoadMeter()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<1.5: pass"]
    )
    try:
        ab.wait_measuring(proc, 60.0, meter)
    finally:
        proc.kill()
        proc.wait()
    others, host = meter.stop()
    assert host == os.cpu_count()
    assert others is not None and others >= 0.0
    busy, _ = ab.busy_cpu_s()
    assert busy is not None and busy > 0
    # a run that does not end in time
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            ab.wait_measuring(sleeper, 0.5, ab.LoadMeter())
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_bounded_run_records_where_its_count_grew():
    import dataclasses

    from tests.unit.builders import proc, sample
    from tests.unit.test_verify import loader_view
    from watchdog.types import ROLE_MAIN

    started = time.monotonic()
    bound = verify_runs.RunBound(None, None, started)
    for dt, batches in ((0.5, 0), (1.0, 3), (1.5, 3), (2.0, 9)):
        s = sample(started + dt, [proc(1, ROLE_MAIN, [])])
        bound.note(dataclasses.replace(s, loaders=(loader_view(1, iterator=1, batches=batches),)))
    assert bound.progress == [(1.0, 3), (2.0, 9)]
    assert bound.summary(0, "batches", [], started + 2.5)["progress"] == [[1.0, 3], [2.0, 9]]
