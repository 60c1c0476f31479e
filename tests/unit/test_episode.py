"""The hang-episode policy (``detect.Episode``), on hand-built stalls: when an examination is
due, what a report already covers, when a stall resolves, and one report per episode."""

from __future__ import annotations

import dataclasses

from tests.unit.builders import stall
from watchdog import detect


def _episode(terminate=False):
    return detect.Episode(stall_timeout_s=5.0, busy_stall_timeout_s=300.0, terminate=terminate)


def _stall(s, since=100.0, **kw):
    return stall(s=s, quiet_since_mono=since, **kw)


def test_an_examination_is_due_at_the_stall_timeout_and_again_a_timeout_after_a_dismissal():
    ep = _episode()
    assert ep.due(_stall(4.0), 104.0) is None
    assert ep.due(_stall(5.0), 105.0) == detect.TRIGGER_STALL
    ep.dismissed(105.0)
    assert ep.due(_stall(9.0), 109.0) is None
    assert ep.due(_stall(10.0), 110.0) == detect.TRIGGER_STALL


def test_a_reported_hang_is_looked_at_again_only_to_escalate_it():
    ep = _episode()
    assert ep.report(detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0), _stall(5.0), 105.0)
    assert ep.due(_stall(20.0), 120.0) is None  # the same unproven hang: no new look at the stall timeout
    stuck = _stall(20.0, stuck_s=((7, 20.0),))
    assert ep.due(stuck, 120.0) == detect.TRIGGER_PROOF  # a proof may come: report mode looks again
    assert ep.already_reported(terminate=False, proven=False) and not ep.already_reported(False, proven=True)
    ended = _episode(terminate=True)
    ended.report(detect.Reported(1.0, True, True, ("fork_inherited_lock", "a.py:9"), 100.0), _stall(5.0), 105.0)
    assert ended.due(stuck, 120.0) is None  # already ending it: nothing to escalate


def test_a_delivered_batch_ends_the_episode_and_says_how_long_a_suspected_stall_lasted():
    ep = _episode()
    ep.report(detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0), _stall(5.0), 105.0)
    assert ep.delivered(1.0, 106.0) is None  # no batch since
    over = ep.delivered(2.0, 112.0)
    assert over is not None and over.key == ("worker_stuck", "a.py:3") and ep.reported is None
    assert ep.resolved[("worker_stuck", "a.py:3")] == 12.0
    proven = _episode()
    proven.report(detect.Reported(1.0, True, True, ("fork_inherited_lock", "b.py:1"), 100.0), _stall(5.0), 105.0)
    assert proven.delivered(2.0, 112.0) is None and not proven.resolved  # a proven hang never "resolves"


def test_one_episode_one_report_until_a_stall_at_that_place_lasts_twice_the_longest_that_resolved():
    ep = _episode()
    key = ("worker_stuck", "a.py:3")
    assert ep.report(detect.Reported(1.0, False, False, key, 100.0), _stall(5.0), 105.0)
    ep.delivered(2.0, 108.0)  # resolved after 8 s
    assert not ep.report(detect.Reported(2.0, False, False, key, 108.0), _stall(5.0, since=108.0), 113.0)
    assert ep.reported is not None and not ep.reported.published
    assert ep.delivered(3.0, 116.0) is None  # an unpublished look resolves silently
    again = dataclasses.replace(detect.Reported(3.0, False, False, key, 116.0))
    assert ep.report(again, _stall(16.0, since=116.0), 132.0)  # twice the longest (8 s): reported
    other = _episode()
    other.resolved[key] = 8.0
    busy = _stall(5.0, trigger=detect.TRIGGER_BUSY)
    assert other.report(detect.Reported(1.0, True, False, key, 100.0), busy, 105.0)  # the ceiling always reports
    assert other.report(detect.Reported(1.0, False, False, ("worker_stuck", "b.py:1"), 100.0), _stall(5.0), 105.0)
