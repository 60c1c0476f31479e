"""How an ended helper of the job is named (issue #34, section 2; watchdog/diagnose/ended.py):
how it ended from its exit record, and its traceback from the captured stderr of
``probes/cases/ready_marker_producer_died.py`` only when nothing else could have printed it."""

from __future__ import annotations

import dataclasses

from tests.unit.builders import HELPER_PID, MAIN_PID, WORKER_PID, ended_helper_facts, fixture, live_facts, proc, sample
from watchdog.diagnose import ended
from watchdog.diagnose.hangs import ended_helpers
from watchdog.types import NO_EXIT_RECORD, ROLE_MAIN, ROLE_OTHER, ROLE_WORKER, ExitRecord

PRODUCER = HELPER_PID
STDERR = fixture("stderr_ready_marker_producer_died.txt")


def _facts(status, stderr=STDERR, others=()):
    return ended_helper_facts(status, others, stderr_tail=stderr)


def _line(facts):
    ((p, ago),) = ended_helpers(facts)
    return ended.ended_line(facts, p, ago, ended.records_of(facts, [p]))


def test_an_ended_producer_is_named_with_its_exit_code_and_its_traceback():
    text = _line(_facts(1 << 8))
    assert f"pid {PRODUCER} " in text and "has ended: it exited with code 1" in text
    assert "last seen alive at" in text and "found ended at" in text
    assert "as Process shard-producer" in text
    assert "RuntimeError: could not prepare the shards: /data/shards is empty" in text
    assert "ready_marker_producer_died.py:25" in text


def test_a_killed_helper_gets_no_traceback_and_an_unrecorded_one_says_so():
    killed = _line(_facts(9))
    assert "was killed by signal 9 (SIGKILL)" in killed and "RuntimeError" not in killed
    unknown = _line(_facts(None, stderr=""))
    assert NO_EXIT_RECORD in unknown and "traceback" not in unknown.split(NO_EXIT_RECORD)[1]


def test_a_traceback_is_not_tied_when_another_process_could_have_printed_it():
    other = ExitRecord(PRODUCER + 1, 5, MAIN_PID, ROLE_OTHER, "python", ("python",), 1.0, 1.0, 2.0, 2.0, 1 << 8)
    text = _line(_facts(1 << 8, others=(other,)))  # two helpers exited with code 1: whose traceback?
    assert "exited with code 1" in text and "RuntimeError" not in text
    assert "RuntimeError" not in _line(_facts(0))  # a clean exit printed no traceback
    assert ended.helper_tracebacks(_facts(1 << 8, stderr=STDERR + STDERR))[0][1].exception.startswith("RuntimeError")


def test_a_helper_that_ended_before_the_timeline_began_is_still_named_unless_it_finished_cleanly():
    # The timeline keeps timeline_samples samples (10 minutes by default); the exit records stay.
    killed = ExitRecord(PRODUCER, 777, MAIN_PID, ROLE_OTHER, "python", ("python",), 1.0, 1e9 + 1, 2.0, 1e9 + 2, 9)
    clean = dataclasses.replace(killed, pid=PRODUCER + 1, start_ticks=778, status=0)
    now = dataclasses.replace(
        sample(900.0, [proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_WORKER, [])]), exits=(clean, killed)
    )
    facts = live_facts((now,))
    assert ended_helpers(facts) == []  # the timeline never saw them
    (old,) = ended.older_records(facts, set())
    assert old is killed
    text = ended.ended_line(facts, old, now.t_mono - old.last_seen_mono, [])
    assert f"pid {PRODUCER} " in text and "was killed by signal 9 (SIGKILL)" in text and "899 s before" in text
