"""``dlwatch probe hook-cost`` states a cost within its noise as noise (issue #38: it printed
-1401.8 µs a batch as the recorder's cost)."""

from __future__ import annotations

from probes import hook_cost


def test_an_interval_holding_zero_is_noise_never_a_negative_cost():
    lo, hi = hook_cost.added_interval([-1401.8, 300.0, -20.0])
    assert (lo, hi) == (-1401.8, 300.0)
    text = hook_cost.added_text(-20.0, lo, hi)
    assert text == "within noise (±1401.8 µs)" and "-" not in text
    assert hook_cost.added_text(-5.0, -9.0, -1.0) == "within noise (±9.0 µs)"  # all negative: noise too


def test_a_cost_above_its_noise_is_given_with_its_interval():
    lo, hi = hook_cost.added_interval([8.1, 12.3, 15.0])
    assert hook_cost.added_text(12.3, lo, hi) == "12.3 (8.1–15.0)"


def test_one_round_has_no_interval():
    assert hook_cost.added_text(4.0, 4.0, 4.0) == "4.0 (one round: no interval)"
    assert hook_cost.added_text(-1401.8, -1401.8, -1401.8) == "within noise (±1401.8 µs, one round)"
