"""One statistic for every paired A/B (issue #38: "the seed's own benchmark runs through the same
path"): ``dlwatch verify``'s throughput runs (``throughput_ab.judge``) and ``dlwatch probe
seed-check``'s claims (``probes.bench.commands.ratio_interval``) both go through
``throughput_ab.paired_interval``: the geometric mean of the pairs' ratios and a Student
t-interval (95 %) on their logs, widened for other processes' share of the CPUs. Fixed numbers,
worked by hand."""

from __future__ import annotations

import math

import pytest

from probes.bench import commands
from probes.bench.grid import LoaderConfig
from probes.bench.measure import Result, Run
from watchdog.commands import throughput_ab as ab

WITHOUT, WITH = [100.0, 200.0, 400.0], [130.0, 260.0, 480.0]  # ratios 1.3, 1.3, 1.2


def test_the_paired_interval_of_fixed_numbers_worked_by_hand():
    # logs: 0.262364, 0.262364, 0.182322; mean 0.235683 (exp 1.265773); sd 0.046213;
    # half-width t(2) 4.303 x 0.046213 / sqrt(3) = 0.114808
    iv = ab.paired_interval(WITHOUT, WITH)
    assert iv is not None and iv.n == 3 and iv.widened_by == 1.0
    assert iv.ratio == pytest.approx(1.265773, abs=1e-6)
    assert iv.sd == pytest.approx(0.046213, abs=1e-6)
    assert iv.low == pytest.approx(math.exp(0.235683 - 0.114808), abs=1e-5)  # 1.128484
    assert iv.high == pytest.approx(math.exp(0.235683 + 0.114808), abs=1e-5)  # 1.419765
    # others held 40 % of the CPUs: the half-width (log units) is 1 / (1 - 0.4) times as wide
    busy = ab.paired_interval(WITHOUT, WITH, share=0.4)
    assert busy is not None and busy.widened_by == pytest.approx(1 / 0.6)
    assert busy.low == pytest.approx(math.exp(0.235683 - 0.114808 / 0.6), abs=1e-5)  # 1.045334
    # a pair without a rate above 0 is left out; one pair says nothing
    assert ab.paired_interval([100.0, 0.0], [130.0, 150.0]) is None


def _bench(workers, rates):
    runs = [Run(0.1, rate, 1.0, 100, 1.0, None, None, None, None, False, False, wall_s=5.0) for rate in rates]
    return Result(LoaderConfig(workers, False, 32, 2, False, "fork"), runs)


def test_seed_checks_claims_and_verifys_runs_get_the_same_interval_from_the_same_rates():
    iv = ab.paired_interval(WITHOUT, WITH)
    assert iv is not None
    # seed-check: W=0 (the rounds' samples/s without) against W workers (with), paired by round
    assert commands.ratio_interval(_bench(2, WITH), _bench(0, WITHOUT)) == (iv.ratio, iv.low, iv.high)
    # verify: the same rates as alternating runs A (without) and B (with)
    runs = [ab.Run("A", i, a) for i, a in enumerate(WITHOUT, 1)] + [ab.Run("B", i, b) for i, b in enumerate(WITH, 1)]
    judged = ab.judge(runs, "num_workers=2")
    assert judged.interval == iv and judged.state == ab.GAIN
    claim = commands.claim_verdicts(_bench(0, WITHOUT), _bench(2, WITH), None, False, "2.x")[0]
    assert claim["held"] is True and "throughput ratio 1.27, interval 1.13–1.42" in claim["evidence"], claim
