"""What the rules derive from one facts (the worker views, the memory series) is kept with
those facts: nothing is shared between two diagnoses, nor between the threads that examine
several ranks at once (``watchdog.watch.node_loop``), and nothing outlives the facts."""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref

from tests.unit.builders import MAIN_PID, WORKER_PID, hang_facts, live_facts, proc, sample, thread
from watchdog.diagnose import diagnose
from watchdog.diagnose.common import memory_points, worker_views
from watchdog.types import ROLE_MAIN, ROLE_WORKER, Facts, Frame, Sample, ThreadStack


class _Traced(Sample):
    """A sample a weak reference can follow (``Sample`` has slots)."""


TORCH = "/opt/venv/lib/python3.11/site-packages/torch/utils/data"
# A worker's loop thread inside the user's Dataset, innermost frame first.
IN_DATASET = ThreadStack(
    WORKER_PID,
    "MainThread",
    False,
    False,
    (
        Frame("__getitem__", "/home/user/train/data.py", 12, False),
        Frame("fetch", f"{TORCH}/_utils/fetch.py", 54, False),
        Frame("_worker_loop", f"{TORCH}/_utils/worker.py", 374, False),
    ),
)

OTHER_WORKER = WORKER_PID + 1


def _two_hangs():
    """The facts of two ranks' hangs: one worker each, under different pids."""
    a = hang_facts([IN_DATASET])
    moved = proc(OTHER_WORKER, ROLE_WORKER, [thread(OTHER_WORKER)], "fork")
    smp = dataclasses.replace(a.sample, processes=(a.sample.processes[0], moved))
    b = dataclasses.replace(a, sample=smp, timeline=(smp,), rank="1")
    return a, b


def _step(turn: threading.Condition, state: dict, mine: int) -> None:
    """Wait until it is step ``mine`` (the threads' calls run in a fixed order)."""
    with turn:
        if not turn.wait_for(lambda: state["step"] == mine, timeout=30):
            raise TimeoutError(f"step {mine} never came")


def _next(turn: threading.Condition, state: dict) -> None:
    with turn:
        state["step"] += 1
        turn.notify_all()


def test_two_ranks_threads_interleaved_each_keep_their_own_worker_views():
    """Rank A's thread reads its views, rank B's thread reads its own in between, then A reads
    again: A gets the same views it had (computed once for its facts), B its own workers. The
    old module-level memo kept only the last facts, so B's read threw A's views away."""
    a, b = _two_hangs()
    turn, state, got, errors = threading.Condition(), {"step": 0}, {}, []

    def rank_a():
        try:
            _step(turn, state, 0)
            got["a1"] = worker_views(a)
            _next(turn, state)
            _step(turn, state, 2)
            got["a2"] = worker_views(a)
            got["a_diag"] = diagnose(a)
            _next(turn, state)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    def rank_b():
        try:
            _step(turn, state, 1)
            got["b"] = worker_views(b)
            got["b_diag"] = diagnose(b)
            _next(turn, state)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=rank_a), threading.Thread(target=rank_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert [v.pid for v in got["a1"]] == [WORKER_PID]
    assert [v.pid for v in got["b"]] == [OTHER_WORKER]
    assert got["a2"] is got["a1"], "rank A's views were computed again after rank B's thread read its own"
    # each thread's diagnosis is the one its facts give alone
    assert got["a_diag"] == diagnose(a) and got["b_diag"] == diagnose(b)
    assert WORKER_PID in got["a_diag"][0].pids and OTHER_WORKER in got["b_diag"][0].pids


def test_memory_series_of_one_facts_is_not_read_from_another():
    """Two live looks at different timelines, interleaved: each one's points are its own."""

    def timeline(growth):
        return tuple(
            sample(
                float(t),
                [
                    proc(MAIN_PID, ROLE_MAIN, [], uss=50),
                    proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=100 + growth * t),
                ],
            )
            for t in range(4)
        )

    a, b = live_facts(timeline(10)), live_facts(timeline(20))
    w = a.sample.process(WORKER_PID)
    assert memory_points(a, w) == [(0.0, 100.0), (1.0, 110.0), (2.0, 120.0), (3.0, 130.0)]
    assert memory_points(b, w) == [(0.0, 100.0), (1.0, 120.0), (2.0, 140.0), (3.0, 160.0)]
    assert memory_points(a, w) == [(0.0, 100.0), (1.0, 110.0), (2.0, 120.0), (3.0, 130.0)]


def test_nothing_derived_outlives_the_facts():
    """Once a diagnosis is done and its facts dropped, nothing of them is kept: the old
    module-level memos held the last facts (stacks, samples) and the last timeline until the
    next look, in a watcher that runs for days."""
    facts = hang_facts([IN_DATASET])
    last = _Traced(**{f.name: getattr(facts.sample, f.name) for f in dataclasses.fields(facts.sample) if f.init})
    facts = dataclasses.replace(facts, sample=last, timeline=(last,))
    del last
    diagnose(facts)
    worker_views(facts)
    memory_points(facts, facts.sample.process(WORKER_PID))
    gone_facts = weakref.ref(facts)
    gone_sample = weakref.ref(facts.timeline[-1])
    del facts
    gc.collect()
    assert gone_facts() is None, "the facts of a finished diagnosis are still referenced"
    assert gone_sample() is None, "the timeline of a finished diagnosis is still referenced"


def test_facts_made_anew_derive_anew():
    """``dataclasses.replace`` makes new facts, which start with nothing derived (a worker
    added to the sample is seen)."""
    a, _ = _two_hangs()
    before = worker_views(a)
    more = proc(OTHER_WORKER, ROLE_WORKER, [thread(OTHER_WORKER)], "fork")
    smp = dataclasses.replace(a.sample, processes=a.sample.processes + (more,))
    grown: Facts = dataclasses.replace(a, sample=smp, timeline=(smp,))
    assert [v.pid for v in before] == [WORKER_PID]
    assert [v.pid for v in worker_views(grown)] == [WORKER_PID, OTHER_WORKER]


def test_no_memory_series_outlives_its_timeline():
    """A live look's memory series goes with its facts (the old memo held the last timeline)."""
    first = sample(0.0, [proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=100)])
    traced = _Traced(**{f.name: getattr(first, f.name) for f in dataclasses.fields(first) if f.init})
    facts = live_facts((traced, sample(1.0, [proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=150)])))
    assert memory_points(facts, facts.sample.process(WORKER_PID)) == [(0.0, 100.0), (1.0, 150.0)]
    gone = weakref.ref(traced)
    del facts, traced
    gc.collect()
    assert gone() is None, "a finished look's timeline is still referenced"
