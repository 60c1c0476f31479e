"""What keeps a look for warnings cheap on a long timeline gives the same answers as the plain
passes it replaced: the window found from the timeline's end, lean samples skipped where they
hold their full sample's processes, and the per-sample and per-process facts kept with them."""

from __future__ import annotations

import dataclasses

from watchdog.diagnose.common import memory_series
from watchdog.diagnose.worker_time import job_stopped
from watchdog.types import ROLE_MAIN, ROLE_WORKER, HostSample, ProcessSample, ProcId, Sample, samples_since

HOST = HostSample(shm_total_bytes=1, shm_used_bytes=0, mem_available_bytes=1, mem_total_bytes=1)


def _proc(pid: int, role, state: str = "S", dirty: int = 0) -> ProcessSample:
    return ProcessSample(
        pid=pid, ppid=1, create_time=0.0, role=role, name="python", cmdline=("python",), state=state,
        wchan="", cpu_s=0.0, rss_bytes=0, uss_bytes=None, pss_bytes=None, num_fds=3,
        rlimit_nofile_soft=1024, num_threads=1, read_chars=0, write_chars=0, start_method="fork",
        dirty_bytes=dirty, start_ticks=pid * 10,
    )  # fmt: skip


def _timeline(n: int = 40):
    """Full samples every 5 s with 4 lean ones between (each holding the full one's processes)."""
    out = []
    for i in range(n):
        if i % 5 == 0:
            procs = (_proc(1, ROLE_MAIN, dirty=100 + i), _proc(2, ROLE_WORKER, dirty=50 + (i // 10)))
            out.append(Sample(t_mono=float(i), wall=float(i), processes=procs, host=HOST))
        else:
            out.append(Sample(t_mono=float(i), wall=float(i), processes=out[-1].processes, host=HOST, lean=True))
    return tuple(out)


def test_samples_since_is_the_tail_a_filter_would_keep():
    timeline = _timeline()
    for t in (-1.0, 0.0, 12.5, 13.0, 39.0, 39.5, 100.0):
        assert list(samples_since(timeline, t)) == [s for s in timeline if s.t_mono >= t]


def test_memory_series_skips_lean_samples_and_finds_the_same_points():
    timeline = _timeline()
    full = tuple(s for s in timeline if not s.lean)
    series = memory_series(timeline)
    assert series == memory_series(full)
    assert series[(1, 10)][:2] == [(0.0, 100.0), (5.0, 105.0)]
    assert [v for _, v in series[(2, 20)]] == [50.0, 51.0, 52.0, 53.0]


def test_a_samples_stopped_flag_is_kept_and_says_what_its_processes_say():
    running = _timeline(1)[0]
    stopped = dataclasses.replace(running, processes=(running.processes[0], _proc(2, ROLE_WORKER, state="T")))
    traced = dataclasses.replace(running, processes=(_proc(1, ROLE_MAIN, state="t"),))
    assert [job_stopped(s) for s in (running, stopped, traced)] == [False, True, True]
    assert stopped.stopped is True and stopped._stopped is True  # kept with the sample


def test_a_process_ident_is_made_once():
    p = _proc(7, ROLE_WORKER)
    assert p.ident == ProcId(7, 70) and p.ident is p.ident
    assert dataclasses.replace(p, pid=8).ident == ProcId(8, 70)  # a copy makes its own


def test_the_workers_seconds_are_kept_only_where_metrics_are_served():
    from tests.unit.test_throughput import timeline as busy_timeline
    from watchdog.collect.warning_stacks import WarningStacks
    from watchdog.types import InsideView
    from watchdog.watch.live_look import LiveLook

    tl = tuple(busy_timeline(0.8, cpu_share=0.25, wchan="hrtimer_nanosleep"))
    view = InsideView(loaders=tl[-1].loaders)
    served, not_served = (LiveLook(WarningStacks(None), lambda *a, **k: None, 2, worker_clock=on) for on in (1, 0))
    for look in (served, not_served):
        look.look(tl[-1], tl, view)
    assert {state for _, state, _ in served.worker_seconds} >= {"cpu", "io"}
    assert not_served.worker_seconds == ()
    assert served.input_verdict == not_served.input_verdict  # the verdict needs no clock


def test_a_lean_ticks_stall_is_the_one_the_whole_measure_gives():
    from tests.unit.test_throughput import timeline as busy_timeline
    from watchdog.detect.progress import ProgressTracker

    tl = busy_timeline(0.5, cpu_share=0.9, state="R", wchan="0")
    frozen = [dataclasses.replace(tl[-1], t_mono=tl[-1].t_mono + dt) for dt in (1.0, 2.0, 3.0)]
    tracker = ProgressTracker(0.05)
    seen = []
    for s in tl + frozen:
        tracker.update(s)
        whole = tracker.stall(s)
        assert tracker.stall_s(s) == (None if whole is None else whole.stall_s)
        seen.append(tracker.stall_s(s))
    assert seen[-1] is not None and seen[-1] >= 3.0  # the frozen samples are a stall
