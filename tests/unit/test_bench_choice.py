"""The benchmark's recommendation (probes/bench/output.py ``choose``): configurations whose
ranges overlap cannot be told apart and the cheapest of them is recommended; a setting with no
effect on this machine (pin_memory without CUDA) is never ranked."""

from __future__ import annotations

from probes.bench import output
from probes.bench.grid import LoaderConfig
from probes.bench.measure import Result, Run


def _result(workers, *rates, pin=False, cuda=False):
    config = LoaderConfig(workers, pin, 32, 2, False, "fork")
    runs = [Run(0.1, rate, 1.0, 100, 1.0, None, None, None, None, cuda, False) for rate in rates]
    return Result(config, runs)


def test_overlapping_ranges_cannot_be_told_apart_and_the_cheaper_is_recommended():
    w2, w4 = _result(2, 900, 1300, 1150), _result(4, 1000, 1500, 1200)  # W=4 faster in median, ranges overlap
    choice = output.choose([w2, w4], cuda=False)
    assert choice.pick is w2 and choice.tied == (w2, w4)
    assert choice.text().startswith("best: cannot be told apart:") and "W=2" in choice.text().split("recommended:")[1]


def test_separated_ranges_name_the_fastest():
    w2, w4 = _result(2, 900, 1000, 950), _result(4, 1400, 1500, 1450)
    choice = output.choose([w2, w4], cuda=False)
    assert choice.pick is w4 and choice.tied == (w4,)
    assert choice.text() == f"best: {w4.config.label()} at 1450 samples/s"


def test_single_runs_need_a_five_percent_gap():
    assert not output.apart(_result(2, 1000), _result(4, 1040))
    assert output.apart(_result(2, 1000), _result(4, 1100))


def test_pin_memory_without_cuda_is_never_ranked_however_fast_it_measured():
    plain, pinned = _result(2, 1000, 1010), _result(2, 3700, 3710, pin=True)  # a 3.7x gap of pure noise
    choice = output.choose([plain, pinned], cuda=False)
    assert choice.pick is plain and choice.ignored == (pinned,)
    with_cuda = output.choose([plain, _result(2, 3700, 3710, pin=True, cuda=True)], cuda=True)
    assert with_cuda.pick.config.pin_memory and not with_cuda.ignored


def test_the_json_document_says_what_was_recommended_and_what_was_tied():
    w2, w4 = _result(2, 900, 1300, 1220), _result(4, 1000, 1500, 1250)
    doc = output.document([w2, w4], {"usable_cpus": 2}, {}, {}, [])
    assert doc["best"]["num_workers"] == 2 and doc["fastest"]["num_workers"] == 4
    assert [c["num_workers"] for c in doc["tied"]] == [2, 4] and doc["unranked"] == []


def test_ties_are_measured_again_until_they_separate_or_the_rounds_run_out():
    import argparse

    from probes.bench.commands import separate_ties

    def args(rounds):
        return argparse.Namespace(extra_rounds=rounds, repeats=3, warmup_batches=2)

    def measuring(rates_by_workers):
        calls = []

        def measure(results, dataset, repeats, warmup):
            calls.append(sorted(r.config.num_workers for r in results))
            for r in results:  # the new runs join the result's own
                r.runs.extend(_result(r.config.num_workers, *rates_by_workers[r.config.num_workers]).runs)
            return results

        return measure, calls

    # overlapping at first; the next round separates them: one round, then the fastest is named
    w1, w2, w4 = _result(1, 500, 520), _result(2, 900, 1300, 1100), _result(4, 1000, 1500, 1200)
    measure, calls = measuring({2: (900, 950, 920) * 3, 4: (1450, 1500, 1480) * 3})
    assert separate_ties([w1, w2, w4], {}, args(5), "bench", False, measure) == 1
    assert calls == [[2, 4]]  # only the tied ones, never the one that stood apart
    assert output.choose([w1, w2, w4], cuda=False).pick is w4
    # still overlapping after every round: the rounds run out, and the cheapest stays recommended
    w2, w4 = _result(2, 900, 1300, 1180), _result(4, 1000, 1500, 1200)
    measure, calls = measuring({2: (900, 1300), 4: (1000, 1500)})
    assert separate_ties([w2, w4], {}, args(2), "bench", False, measure) == 2 and len(calls) == 2
    assert output.choose([w2, w4], cuda=False).pick is w2
    # apart from the start, or no round allowed: nothing is measured
    measure, calls = measuring({})
    assert separate_ties([_result(2, 900, 950), _result(4, 1400, 1450)], {}, args(2), "bench", False, measure) == 0
    assert separate_ties([_result(2, 900, 1300), _result(4, 1000, 1500)], {}, args(0), "bench", False, measure) == 0
    assert calls == []


def test_the_medians_interval_is_the_whole_range_for_few_runs_and_narrows_with_more():
    from probes.bench.measure import median_interval

    assert median_interval([]) == (0.0, 0.0)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_interval(range(1, 6)) == (1, 5)  # 5 runs: still the range (93.8 % coverage)
    assert median_interval(range(1, 10)) == (2, 8)  # 9 runs: ranks 2..8
    assert median_interval(range(1, 16)) == (4, 12)  # 15 runs: ranks 4..12
    # one outlier run no longer keeps two configurations tied once each has enough runs
    slow = [100.0] * 8 + [150.0]
    fast = [140.0] * 9
    assert median_interval(slow)[1] < median_interval(fast)[0]


def test_the_slowest_of_a_tie_is_not_recommended_for_being_cheapest():
    # Issue #38: on a shared machine every range overlapped, and "the cheapest of the tied" picked
    # num_workers=1 in two runs that both ranked its median slowest of the three.
    w1, w2, w4 = _result(1, 700, 1000, 1300), _result(2, 800, 1200, 1400), _result(4, 750, 1150, 1450)
    choice = output.choose([w1, w2, w4], cuda=False)
    assert len(choice.tied) == 3  # they still cannot be told apart, and the line says so
    assert choice.pick is w2  # the fastest: W=1's median is 17 % below it
    assert "so the fastest is recommended: W=2" in choice.text()
    # within 5 % of the fastest, the cheaper is as good: it is recommended
    w1 = _result(1, 700, 1150, 1300)
    assert output.choose([w1, w2, w4], cuda=False).pick is w1


def test_at_equal_cost_the_faster_median_is_recommended():
    # Same workers, pin, prefetch and persistence (only the batch size differs): equally costly,
    # so the faster median wins whatever the order of the grid.
    slow = Result(LoaderConfig(2, False, 32, 2, False, "fork"), _result(2, 900, 1000, 1100).runs)
    fast = Result(LoaderConfig(2, False, 64, 2, False, "fork"), _result(2, 950, 1200, 1250).runs)
    assert output.choose([slow, fast], cuda=False).pick is fast
    assert output.choose([fast, slow], cuda=False).pick is fast
    # never a configuration when another tied one is faster and no more costly
    for rs in ([slow, fast], [fast, slow]):
        c = output.choose(rs, cuda=False)
        assert not any(o.throughput > c.pick.throughput and output._cost(o) <= output._cost(c.pick) for o in c.tied)
