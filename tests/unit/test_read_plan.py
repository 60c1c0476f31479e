"""The read plan (watchdog/collect/read_plan.py) on records: which tick is lean, which reads
threads, decided from the last samples alone (NOTE [ Lean ticks ], NOTE [ Thread reads ])."""

from __future__ import annotations

import dataclasses

from tests.unit.builders import loader_view, proc, sample, thread
from watchdog.collect.read_plan import FULL_TICK, Cadence, PlanState, ReadPlan, after_sample, after_skip, next_plan
from watchdog.types import ROLE_MAIN, ROLE_WORKER

# interval 1 s, warnings every 30 s, stall timeout 60 s, stall_min_s 10 s: a full sample at
# least every 30 s, threads at least every 15 s, ticks skipped within 2.5 s of the last one taken
CADENCE = Cadence.of(1.0, 30.0, 60.0, 10.0)


def _at(t: float, cpu_each: float, lean: bool = False, threads: bool = True, inside: bool = True, io: int = 0):
    """Main and two workers, each having used ``cpu_each`` CPU seconds and read ``io`` bytes
    by ``t``; with the inside view (one of main's iterators) unless ``inside`` is false."""
    s = sample(
        t,
        [proc(10, ROLE_MAIN, [thread(10)], cpu=cpu_each, cpu_affinity=2)]
        + [proc(p, ROLE_WORKER, [thread(p)], "fork", cpu=cpu_each, read_chars=io) for p in (11, 12)],
    )
    loaders = (loader_view(10),) if inside else ()
    return dataclasses.replace(s, lean=lean, threads_read=threads, loaders=loaders, may_lean=True)


def test_the_cadence_follows_the_settings():
    assert CADENCE == Cadence(
        interval_s=1.0, full_every_s=30.0, look_every_s=30.0, threads_every_s=15.0, skip_span_s=2.5
    )
    assert Cadence.of(1.0, 120.0, 60.0, 10.0).full_every_s == 30.0  # half the stall timeout when shorter
    assert Cadence.of(1.0, 15.0, 60.0, 2.0).skip_span_s == 0.5  # a quarter of stall_min_s when shorter
    assert Cadence.of(0.2, 15.0, 60.0, 10.0).skip_span_s == 0.5  # never more than two ticks in a row


def test_a_tick_that_delivered_is_followed_by_a_lean_one_until_a_full_one_is_due():
    state = after_sample(PlanState(), _at(0.0, 0.0), 64)
    assert next_plan(state, CADENCE, 3.0, delivered=True, last_look=0.0) == ReadPlan(
        lean=True, threads=True, inside=True
    )  # busy unknown after the first full sample: threads read; 4 s after it: not skipped
    assert not next_plan(state, CADENCE, 0.0, delivered=False, last_look=0.0).lean  # a stall is measured on full ones
    assert not next_plan(state, CADENCE, 29.5, delivered=True, last_look=29.5).lean  # full_every_s comes due
    assert not next_plan(state, CADENCE, 10.0, delivered=True, last_look=-25.0).lean  # a look is due


def test_while_the_loader_delivers_ticks_within_the_skip_span_are_skipped_and_none_that_is_due_full():
    state = after_sample(PlanState(), _at(0.0, 0.0), 64)  # a full one the plan asked for
    skipped = next_plan(state, CADENCE, 0.0, delivered=True, last_look=0.0)
    assert skipped.skip and skipped.lean
    assert after_skip(state, CADENCE, 1.0, last_look=0.0).skip  # the next would come 2 s after: skipped
    after = after_skip(state, CADENCE, 2.0, last_look=0.0)  # 3 s after the last one taken: taken
    assert after == ReadPlan(lean=True, threads=True, inside=True)
    lean = after_sample(state, _at(3.0, 0.0, lean=True), 64, plan=after)
    assert lean.skip_from == 3.0 and next_plan(lean, CADENCE, 3.0, delivered=True, last_look=0.0).skip
    # the plan asked a lean one, the sampler took a full one (memory short, a young process, one ended)
    forced = after_sample(state, _at(1.0, 0.0), 64, plan=after)
    assert forced.skip_from is None and not next_plan(forced, CADENCE, 1.0, delivered=True, last_look=0.0).skip
    # a full one the plan asked for, that no lean one may follow (memory short, a process young or ended)
    unsettled = after_sample(state, dataclasses.replace(_at(1.0, 0.0), may_lean=False), 64)
    assert unsettled.skip_from is None and not next_plan(unsettled, CADENCE, 1.0, delivered=True, last_look=0.0).skip
    assert not next_plan(state, CADENCE, 0.0, delivered=False, last_look=0.0).skip  # no batch
    assert not next_plan(state, CADENCE, 29.5, delivered=True, last_look=29.5).skip  # full due
    assert not next_plan(state, CADENCE, 0.0, delivered=True, last_look=-29.5).skip  # a look
    assert not after_skip(state, CADENCE, 29.5, last_look=0.0).lean  # due after a skipped tick: full
    # a stall_min_s of 2 s: a quarter of it is under one interval, no tick is skipped
    assert not next_plan(state, Cadence.of(1.0, 30.0, 60.0, 2.0), 0.0, delivered=True, last_look=0.0).skip
    # without the inside view the workers' counters make the ticks lean, never skipped
    moved = after_sample(
        after_sample(PlanState(), _at(0.0, 0.0, inside=False), 64), _at(10.0, 0.0, inside=False, io=4096), 64
    )
    assert moved.workers_moved
    plan = next_plan(moved, CADENCE, 10.0, delivered=False, last_look=10.0)
    assert plan.lean and not plan.skip


def test_a_lean_sample_changes_nothing_of_what_the_plan_remembers_but_when_it_was_taken():
    state = after_sample(PlanState(), _at(0.0, 0.0), 64)
    assert after_sample(state, _at(1.0, 0.5, lean=True), 64) == dataclasses.replace(state, skip_from=1.0)


def test_threads_are_left_out_only_while_batches_flow_on_idle_cpus_and_were_read_lately():
    idle = after_sample(after_sample(PlanState(), _at(0.0, 0.0), 64), _at(10.0, 1.0), 64)  # 0.15 of 2 CPUs
    assert not idle.cpu_busy and idle.threads_at == 10.0
    assert not next_plan(idle, CADENCE, 10.0, delivered=True, last_look=10.0).threads
    assert next_plan(idle, CADENCE, 10.0, delivered=False, last_look=10.0).threads  # no batch: judged on threads
    assert next_plan(idle, CADENCE, 24.5, delivered=True, last_look=24.5).threads  # 15 s since the last read
    busy = after_sample(after_sample(PlanState(), _at(0.0, 0.0), 64), _at(10.0, 4.0), 64)  # 0.6 of 2 CPUs
    assert busy.cpu_busy and next_plan(busy, CADENCE, 10.0, delivered=True, last_look=10.0).threads


def test_a_full_sample_without_threads_keeps_the_last_thread_read_dated():
    state = after_sample(PlanState(), _at(0.0, 0.0), 64)
    later = after_sample(state, _at(5.0, 0.0, threads=False), 64)
    assert later.threads_at == 0.0 and later.full_at == 5.0


def test_the_first_tick_reads_everything():
    assert FULL_TICK == ReadPlan(lean=False, threads=True, inside=True)


def test_without_the_inside_view_threads_are_left_out_while_the_workers_own_counters_move():
    # dlwatch attach to a job started without the hook: no batch is counted; a worker whose
    # I/O bytes or CPU moved stands in for it (NOTE [ Thread reads ] in read_plan.py)
    def plan(before, after, t=10.0, last_look=10.0):
        state = after_sample(after_sample(PlanState(), before, 64), after, 64)
        return state, next_plan(state, CADENCE, t, delivered=False, last_look=last_look)

    state, p = plan(_at(0.0, 0.0, inside=False), _at(10.0, 0.0, inside=False, io=4096))  # idle CPUs, I/O moved
    assert state.workers_moved and not state.cpu_busy and not p.threads
    assert p.lean  # the workers' counters stand in for the batch count of NOTE [ Lean ticks ] too
    assert not plan(_at(0.0, 0.0, inside=False), _at(10.0, 0.0, inside=False, io=4096), t=39.5)[1].lean  # 30 s
    assert plan(_at(0.0, 0.0, inside=False), _at(10.0, 0.0, inside=False, io=4096), t=24.5)[1].threads  # 15 s since
    _, still = plan(_at(0.0, 0.0, inside=False), _at(10.0, 0.001, inside=False))  # an idle poll's CPU: still
    assert still.threads and not still.lean  # a stopped loader is judged on threads from its first still sample
    busy, p = plan(_at(0.0, 0.0, inside=False), _at(10.0, 4.0, inside=False))  # moving, 0.6 of 2 CPUs
    assert busy.workers_moved and busy.cpu_busy and not p.threads  # a look is not due: none
    assert plan(_at(0.0, 0.0, inside=False), _at(10.0, 4.0, inside=False), last_look=-25.0)[1].threads  # one is
    # with the inside view, a tick that delivered nothing reads threads whatever the workers did
    inside, p = plan(_at(0.0, 0.0), _at(10.0, 0.0, io=4096))
    assert not inside.workers_moved and p.threads
