"""The watch loop's public face, on this test process itself (nothing is started): what
other threads read of a watcher (:meth:`Watcher.status`), and the roles and examination
switch a job-level watcher is given by its node loop (:meth:`Sampler.set_roles`)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

from watchdog import config
from watchdog.types import ROLE_LAUNCHER, RankId, WatcherStatus
from watchdog.watch.job import WatchedJob
from watchdog.watch.wake import Waker
from watchdog.watch.watcher import Watcher


def _job(inside=None) -> WatchedJob:
    return WatchedJob(os.getpid(), None, lambda: False, inside=inside)


def _watcher(inside=None, rank=None, **kw) -> Watcher:
    return Watcher(config.Config(), _job(inside), RankId.of(rank) if rank else None, **kw)


def test_the_status_is_a_frozen_snapshot_replaced_at_each_tick():
    w = _watcher(rank={"RANK": "3", "WORLD_SIZE": "4"})
    before = w.status()
    vars_ = (("RANK", "3"), ("WORLD_SIZE", "4"))
    assert before == WatcherStatus(rank="3", root_pid=os.getpid(), rank_vars=vars_) and before.sample is None
    w.step()
    after = w.status()
    assert after is not before and after.sample is not None and after.sample.main is not None
    assert after.sample.main.pid == os.getpid() and after.rank == "3" and after.last_hang_kind == ""
    assert before.sample is None  # what another thread held is never changed under it


def test_roles_set_from_outside_name_processes_in_the_next_sample_and_examination_can_be_turned_off():
    w = _watcher()
    w.sampler.set_roles({os.getpid(): ROLE_LAUNCHER})
    w.examine = False
    w.step()
    main = w.status().sample.main
    assert main is not None and main.role is ROLE_LAUNCHER and not w.examine


def test_an_examination_apart_runs_after_the_tick_in_its_own_thread_and_the_node_loop_skips_that_rank_meanwhile():
    # NOTE [ One loop for the node ]: a rank's due examination starts once its tick is over,
    # in a thread of its own; the job's loop does not step that rank until it is over.
    from watchdog.types import ProcId
    from watchdog.watch.node_loop import NodeLoop

    w = _watcher(examine_apart=True, rank={"RANK": "1"})
    w.step()
    sample = w.status().sample
    release, began = threading.Event(), []

    def examine(s, stall):
        began.append((s, threading.current_thread().name))
        release.wait(10)
        w.hangs.last_kind, w.hangs.in_loader = "fork_inherited_lock", True  # as a report sets them

    w.hangs.examine = examine
    w._apart.due = (sample, w.tracker.stall(sample))
    job = NodeLoop(config.Config(), _job(), Waker())
    job.ranks[ProcId(os.getpid(), 1)] = w
    stepped = []
    real_step = w.step
    w.step = lambda: (stepped.append(1), real_step())
    real_step()  # the tick at which it was found due: it starts after it
    deadline = time.monotonic() + 10
    while not began and time.monotonic() < deadline:
        time.sleep(0.01)
    assert began == [(sample, "examine-rank-1")] and w.examining  # not in the tick's thread
    job._step_ranks()
    assert stepped == []  # examining: not stepped
    release.set()
    assert w.join_examination(10.0) and not w.examining
    assert w.status().last_hang_kind == "fork_inherited_lock" and w.status().hang_in_loader  # told at once
    job._step_ranks()
    assert stepped == [1]


def test_a_hang_that_resolved_just_before_the_job_ended_is_recorded_resolved(tmp_path):
    import json

    from watchdog import detect

    w = _watcher()
    folder = tmp_path / "report"
    folder.mkdir()
    w.hangs.open = [str(folder)]  # a suspected hang reported; then a batch came, said at the next tick
    w.hangs.resolved = (detect.Reported(1.0, False, False, ("worker_stuck", "data.py:9"), 100.0), 112.0)
    w.after_exit(0)
    became = json.loads((folder / "outcome.json").read_text())
    assert became["outcome"] == "resolved" and became["resolved_after_s"] == 12.0 and became["exit_code"] == 0
    assert "then the job ended with exit code 0" in became["summary"]


def test_a_hang_still_open_when_the_job_ended_says_how_it_ended_once(tmp_path):
    import json
    import signal

    w = _watcher()
    folder = tmp_path / "report"
    folder.mkdir()
    w.hangs.open = [str(folder)]
    w.after_exit(None, signalled=signal.SIGTERM)
    became = json.loads((folder / "outcome.json").read_text())
    assert became["outcome"] == "job_ended" and "after the SIGTERM dlwatch forwarded to it" in became["summary"]
    assert w.hangs.open == [] and w.hangs.resolved is None  # written once: nothing left open


def test_threads_are_asked_for_while_the_tree_keeps_half_its_usable_cpus_busy():
    # NOTE [ Thread reads ]: between two full samples 10 s apart, a tree of main and two
    # workers pinned to 2 CPUs used 6 s (0.3 of them: no thread reads while batches flow) or
    # 12 s of CPU (0.6: threads read, cpu_oversubscribed may need them).
    from tests.unit.builders import proc, sample, thread
    from watchdog.collect.read_plan import PlanState, after_sample, cpu_share
    from watchdog.types import ROLE_MAIN, ROLE_WORKER

    def at(t, cpu_each):
        return sample(
            t,
            [proc(10, ROLE_MAIN, [thread(10)], cpu=cpu_each, cpu_affinity=2)]
            + [proc(p, ROLE_WORKER, [thread(p)], "fork", cpu=cpu_each) for p in (11, 12)],
        )

    def busy(before, after):
        return after_sample(after_sample(PlanState(), before, 64), after, 64).cpu_busy

    assert cpu_share(at(0.0, 0.0), at(10.0, 2.0), 2.0) == 0.3
    assert not busy(at(0.0, 0.0), at(10.0, 2.0))
    assert busy(at(0.0, 0.0), at(10.0, 4.0))
    assert after_sample(PlanState(), at(10.0, 0.0), 64).cpu_busy  # unknown: threads are read
    assert cpu_share(at(0.0, 0.0), at(0.05, 1.0), 2.0) is None  # too close to measure


def test_a_lean_tick_reads_the_workers_counts_only_when_no_batch_reached_main(tmp_path):
    # NOTE [ Lean ticks ]: the recorder's own writer (in this process) keeps main's counters; a
    # worker's sample count is a .fetch file. While main's batch count moves, the workers'
    # counts are the last sample's (the same object); once it stands still, they are read.
    import dataclasses
    import mmap

    from tests.unit.builders import proc, sample, thread
    from watchdog.collect import inside
    from watchdog.types import ROLE_MAIN, ROLE_WORKER

    fmt, worker = inside.FORMAT, 999_999
    recorder = fmt._Process(str(tmp_path))
    slot = recorder.new_iterator({})
    fetch = tmp_path / f"{worker}.fetch"
    fetch.write_bytes(bytes(fmt.FETCH.size))

    def fetched(count):
        with open(fetch, "r+b") as f:
            buf = mmap.mmap(f.fileno(), fmt.FETCH.size)
            fmt.FETCH.pack_into(buf, 0, count, 1_000_000_000)
            buf.close()

    s = _watcher(inside=inside.InsideReader(str(tmp_path))).sampler.views
    now = sample(1.0, [proc(os.getpid(), ROLE_MAIN, [thread(os.getpid())]), proc(worker, ROLE_WORKER, [], "fork")])
    fetched(1)
    first = s.read([os.getpid(), worker], forks=False)  # a full read lists the folder
    assert first.loaders and first.fetches[0].samples == 1
    s._view_sample = dataclasses.replace(now, loaders=first.loaders, fetches=first.fetches)
    slot.delivered()
    fetched(2)
    moved = s.counters_view(now)
    assert moved.loaders[0].batches == 1 and moved.fetches is first.fetches  # not read
    s._view_sample = dataclasses.replace(now, loaders=moved.loaders, fetches=moved.fetches)
    still = s.counters_view(now)
    assert still.loaders[0].batches == 1 and still.fetches[0].samples == 2  # read


def test_a_job_level_sample_reads_no_inside_view_of_the_ranks_it_borrowed_but_takes_their_watchers(tmp_path):
    # The job-level sample of a multi-rank job borrows each rank's processes from the rank's
    # watcher; the inside view of those pids is taken from the same watcher's latest sample,
    # and the folder is read for the other processes only.
    from watchdog.collect import inside
    from watchdog.types import InsideView, ProcId, WorkerFetch
    from watchdog.watch.node_loop import NodeLoop

    asked = []

    class Reader(inside.InsideReader):
        def read(self, pids=None, forks=True, counters=False):
            asked.append(sorted(pids))
            return InsideView(fetches=(WorkerFetch(11, 3, None),))

    keys = ("wait_ns", "since_ns", "last_ns", "waiting_idx", "waiting_worker", "epoch", "first_ns")
    slot = {"iterator": 7, "batches": 5, "hist": [0] * inside.FORMAT.BUCKETS, **dict.fromkeys(keys, 0)}
    (loader,) = inside.loader_views(os.getpid(), {"iterators": [{"id": 7}]}, [slot])
    rank = _watcher(rank={"RANK": "0"})
    rank.step()
    rank._status = dataclasses.replace(
        rank.status(), sample=dataclasses.replace(rank.status().sample, loaders=(loader,), fetches=())
    )
    job = NodeLoop(config.Config(), _job(Reader(str(tmp_path))), Waker())
    job.ranks[ProcId(os.getpid(), 1)] = rank
    assert job._borrowed_view({os.getpid()}) == ((loader,), ())
    assert job._borrowed_view({4_000_002}) == ((), ())
    sample = rank.status().sample
    launcher = dataclasses.replace(sample.main, pid=4_000_002)
    view = job.job.sampler.views.full_view(
        dataclasses.replace(sample, processes=(launcher, sample.main)), {os.getpid()}
    )
    assert asked == [[4_000_002]]  # the launcher's files only
    assert view.loaders == (loader,) and view.fetches == (WorkerFetch(11, 3, None),)


def test_a_rank_whose_tick_blocks_is_left_to_it_and_the_other_ranks_are_still_stepped(monkeypatch, capsys):
    # NOTE [ One loop for the node ]: a tick blocked in the kernel (a /proc read of a process in
    # D state) stops the stepper's thread, never the job's loop: the round is given up after
    # _STEP_WAIT_S, the next rounds step the other ranks, and the blocked one is stepped again
    # once its tick returns.
    from watchdog.types import ProcId
    from watchdog.watch import node_loop as ranks

    monkeypatch.setattr(ranks, "_STEP_WAIT_S", 0.3)
    job = ranks.NodeLoop(config.Config(), _job(), Waker())
    stuck, other = _watcher(rank={"RANK": "0"}), _watcher(rank={"RANK": "1"})
    release, steps = threading.Event(), {"stuck": 0, "other": 0}

    def blocked_step():
        steps["stuck"] += 1
        release.wait(10)

    stuck.step = blocked_step
    other.step = lambda: steps.__setitem__("other", steps["other"] + 1)
    job.ranks[ProcId(1, 1)], job.ranks[ProcId(2, 2)] = stuck, other
    t0 = time.monotonic()
    job._step_ranks()
    assert time.monotonic() - t0 < 5 and steps == {"stuck": 1, "other": 0}
    assert "rank 0" in capsys.readouterr().err
    for _ in range(3):
        job._step_ranks()
    assert steps == {"stuck": 1, "other": 3}  # the blocked rank is not stepped again meanwhile
    release.set()
    deadline = time.monotonic() + 10
    while any(st.alive for st in job._abandoned) and time.monotonic() < deadline:
        time.sleep(0.01)
    job._step_ranks()
    assert steps == {"stuck": 2, "other": 4}
    job._stop_ranks()


def test_the_tree_ranks_are_looked_for_in_changes_when_a_launchers_child_runs_the_ranks_program():
    # A launcher's child forked before it exec'd the rank's program has the launcher's name
    # (both "python") and no RANK yet: its new command line alone must make the ranks be looked
    # for again, or the rank goes unwatched until the next look (30 s: a short job's whole life).
    from watchdog.watch.node_loop import NodeLoop

    job = NodeLoop(config.Config(), _job(), Waker())
    job.job.step()
    before = job._tree_now()
    sample = job.job.status().sample
    forked = dataclasses.replace(sample.main, cmdline=("python", "-m", "torch.distributed.run", "train.py"))
    execd = dataclasses.replace(forked, cmdline=("python", "train.py"))
    job.job._status = dataclasses.replace(job.job.status(), sample=dataclasses.replace(sample, processes=(forked,)))
    assert job._tree_now() != before
    first = job._tree_now()
    job.job._status = dataclasses.replace(job.job.status(), sample=dataclasses.replace(sample, processes=(execd,)))
    assert job._tree_now() != first


def test_a_hang_report_that_resolved_is_no_failure_of_the_job_but_one_still_open_is(tmp_path):
    # Issue #34: a 45 s retry that then succeeded was reported suspected, and `attach` exited 3
    # for a job that exited 0. A report that resolved by itself is not a failure (Exit.OK).
    from watchdog import detect

    w = _watcher()
    folder = tmp_path / "report"
    folder.mkdir()
    w.outcome.reports.append(str(folder))
    w.hangs.open = [str(folder)]
    w.hangs.resolved = (detect.Reported(1.0, False, False, ("worker_stuck", "data.py:9"), 100.0), 145.0)
    w.after_exit(0)
    assert w.outcome.resolved == [str(folder)] and w.outcome.failures == []
    still = _watcher()
    still.outcome.reports.append(str(folder))
    still.hangs.open = [str(folder)]
    still.after_exit(0)
    assert still.outcome.resolved == [] and still.outcome.failures == [str(folder)]


def test_a_stall_found_not_a_hang_is_said_once_then_only_when_its_reason_changes(capsys):
    # Issue #34: one long batch, examined every stall_timeout_s, was said 27 times.
    from tests.unit.builders import stall

    w = _watcher()
    for s in range(10, 300, 10):
        reason = f"no batch for {s} s, but dataloader_worker pid 41 used {s / 10:.1f} s of CPU: working on a sample"
        w.hangs._say_dismissed(stall(s=float(s)), reason)
    said = [line for line in capsys.readouterr().err.splitlines() if "not a hang" in line]
    assert len(said) == 1 and "no batch for 10 s" in said[0]
    w.hangs._say_dismissed(stall(s=310.0), "pid 42 waits for a lock on /d/x.lock that pid 7 holds: slow, not stuck")
    said = [line for line in capsys.readouterr().err.splitlines() if "not a hang" in line]
    assert len(said) == 1 and "lock" in said[0]


def test_a_tick_the_read_plan_skips_reads_nothing_and_the_next_is_taken_once_the_skip_span_is_over():
    # NOTE [ Lean ticks ]: while the loader delivers, ticks within Cadence.skip_span_s of the last one taken are skipped
    from watchdog.collect.read_plan import ReadPlan

    w = _watcher()
    w.step()
    taken = len(w.timeline)
    before = w.status()
    w._plan = ReadPlan(lean=True, inside=True, skip=True)
    w._plan_state = dataclasses.replace(w._plan_state, skip_from=time.monotonic())
    w.step()
    assert len(w.timeline) == taken and w.status() is before  # nothing read, nothing refreshed
    assert w._plan.skip  # the next tick would come within 2.5 s of the last one taken: skipped too
    w._plan_state = dataclasses.replace(w._plan_state, skip_from=time.monotonic() - 2.0)
    w.step()
    assert len(w.timeline) == taken and not w._plan.skip  # 3 s after the last taken: the next one is taken
    w.step()
    assert len(w.timeline) == taken + 1
