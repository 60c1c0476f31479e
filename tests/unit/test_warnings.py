"""Warnings that are true (issue #35 section 4), on hand-built timelines: memory growth is
judged from the loader's first batch on and must go on past a plateau before it predicts
exhaustion; a replicated IterableDataset is judged on each worker's first records, never on a
worker that yielded nothing. The healthy jobs these model run for real in
``tests/real/test_cases.py`` (``healthy_main_table_load``, ``healthy_worker_allocator_plateau``,
``healthy_iterable_shared_first``)."""

from __future__ import annotations

import dataclasses

import torch

from tests.unit.builders import MAIN_PID, WORKER_PID, live_facts, proc, sample
from watchdog.collect import inside
from watchdog.diagnose import diagnose
from watchdog.types import MODE_EXIT, ROLE_MAIN, ROLE_WORKER, Facts, InsideView, LoaderView

MiB = 2**20
FMT = inside.FORMAT  # the recorder that runs inside the job (watchdog/bootstrap/_dlwatch_inside.py)


def loader(batches: int, first_batches=(), workers=(WORKER_PID, WORKER_PID + 1)) -> LoaderView:
    return LoaderView(
        pid=MAIN_PID,
        iterator=1,
        kind="_MultiProcessingDataLoaderIter",
        site=None,
        settings=(("num_workers", len(workers)), ("batch_size", 1)),
        dataset_type="Stream",
        iterable=True,
        workers=tuple(workers),
        worker_exitcodes=(),
        created=0.0,
        batches=batches,
        wait_s=0.0,
        epoch=0,
        first_batch_s=None,
        waiting_since=None,
        waiting_idx=0,
        waiting_worker=-1,
        last_batch=None,
        intervals=0,
        interval_p50_s=None,
        interval_p99_s=None,
        first_batches=tuple(first_batches),
    )


def with_host(s, available, limit=None, used=None):
    return dataclasses.replace(
        s,
        host=dataclasses.replace(
            s.host, mem_available_bytes=available, mem_limit_bytes=limit, mem_cgroup_usage_bytes=used
        ),
    )


def kinds(facts):
    return [d.kind for d in diagnose(facts)]


# --- main's memory ----------------------------------------------------------------------------------


def main_timeline(mib_at, seconds, loader_from=None, first_batch_at=None, workers_from=None, available=1 << 30):
    """One sample a second for t = 0 … ``seconds``: main's private dirty memory ``mib_at(t)``
    MiB; an iterator from ``loader_from`` on (batches from ``first_batch_at``); two workers
    from ``workers_from`` (default: with the iterator)."""
    workers_from = loader_from if workers_from is None else workers_from

    def s(t):
        main = dataclasses.replace(
            proc(MAIN_PID, ROLE_MAIN, [], uss=int(mib_at(t) * MiB)), dirty_bytes=int(mib_at(t) * MiB)
        )
        procs = [main]
        if workers_from is not None and t >= workers_from:
            procs += [proc(WORKER_PID + k, ROLE_WORKER, [], "fork", uss=20 * MiB) for k in range(2)]
        smp = with_host(sample(float(t), procs), available)
        if loader_from is not None and t >= loader_from:
            batches = int(t - first_batch_at + 1) if first_batch_at is not None and t >= first_batch_at else 0
            smp = dataclasses.replace(smp, loaders=(loader(batches),))
        return smp

    return tuple(s(t) for t in range(seconds + 1))


def test_main_growth_before_the_loaders_first_batch_is_start_up_not_a_trend():
    def table_load(t):  # 30 MiB/s for 14 s (a table read once), then flat
        return 200 + 30 * min(t, 14)

    # The iterator starts at 16 s, its first batch at 18 s: main is flat from then on.
    loaded = main_timeline(table_load, 40, loader_from=16, first_batch_at=18)
    assert "main_memory_growth" not in kinds(live_facts(loaded))
    # Without the inside view, the first sample with workers marks the start.
    no_hook = main_timeline(table_load, 40, workers_from=16)
    assert "main_memory_growth" not in kinds(live_facts(no_hook))
    # While it loads (`import torch, lightning`, a table): no iterator, no worker yet.
    assert "main_memory_growth" not in kinds(live_facts(loaded[:15]))
    # The same growth after the first batch is a leak: warned.
    leak = main_timeline(lambda t: 200 + 30 * max(0, t - 18), 40, loader_from=16, first_batch_at=18)
    (found,) = [d for d in diagnose(live_facts(leak)) if d.kind == "main_memory_growth"]
    assert "30.0 MiB/s" in found.summary


def test_main_growth_that_levelled_off_predicts_no_exhaustion():
    # After the first batch main grows 30 MiB/s for 12 s, then stays flat for 28 s (a cache
    # that filled): no warning. Growing again past that plateau is one.
    plateau = main_timeline(lambda t: 200 + 30 * min(t, 12), 40, loader_from=0, first_batch_at=0)
    assert "main_memory_growth" not in kinds(live_facts(plateau))
    again = main_timeline(lambda t: 200 + 30 * min(t, 12) + 30 * max(0, t - 25), 40, loader_from=0, first_batch_at=0)
    assert "main_memory_growth" in kinds(live_facts(again))


# --- workers' memory --------------------------------------------------------------------------------


def worker_timeline(mib_per_s, grow_s, seconds, available):
    """Two forked workers whose private dirty memory grows ``mib_per_s`` for ``grow_s`` seconds
    from the first batch (t = 0), then stays flat, up to t = ``seconds``; main holds 2000 MiB
    (the workers' level stays below what copy-on-read is judged by)."""

    def s(t):
        level = (30 + mib_per_s * min(t, grow_s)) * MiB
        workers = [
            dataclasses.replace(proc(WORKER_PID + k, ROLE_WORKER, [], "fork", uss=int(level)), dirty_bytes=int(level))
            for k in range(2)
        ]
        smp = with_host(sample(float(t), [proc(MAIN_PID, ROLE_MAIN, [], uss=2000 * MiB), *workers]), available)
        return dataclasses.replace(smp, loaders=(loader(t + 1),))

    return tuple(s(t) for t in range(seconds + 1))


def test_a_worker_allocator_plateau_is_not_growth():
    # +160 MiB in 10 s per worker (glibc keeping freed samples), then flat for 50 s: no warning.
    assert "worker_memory_growth" not in kinds(live_facts(worker_timeline(16, 10, 60, available=16 << 30)))
    # While it grows, 10 s of growth cannot predict an exhaustion 8.5 min away (16 GiB left).
    assert "worker_memory_growth" not in kinds(live_facts(worker_timeline(16, 10, 10, available=16 << 30)))
    # A growth that goes on toward a near limit is warned about, with its time left.
    (found,) = [
        d
        for d in diagnose(live_facts(worker_timeline(16, 20, 20, available=1 << 30)))
        if d.kind == "worker_memory_growth"
    ]
    assert "grow steadily" in found.summary and "runs out in about" in found.summary


def test_a_worker_growth_that_needs_hours_to_exhaust_memory_is_not_a_warning():
    # +2 MiB/s per worker for 2 min with 64 GiB left: hours away, beyond the horizon.
    assert "worker_memory_growth" not in kinds(live_facts(worker_timeline(2, 120, 120, available=64 << 30)))


def test_pinned_memory_that_reached_its_high_water_mark_is_not_growth():
    def timeline(values_mib):
        return [
            sample(float(i * 10), [proc(MAIN_PID, ROLE_MAIN, [], pinned_bytes=v * MiB)], total=64 << 30)
            for i, v in enumerate(values_mib)
        ]

    # The caching host allocator grew to 4 GiB in 30 s, then held it for 2 min.
    assert "pinned_memory_growth" not in kinds(live_facts(timeline([1024, 2048, 3072, 4096] + [4096] * 12)))
    assert "pinned_memory_growth" in kinds(live_facts(timeline([1024, 2048, 3072, 4096, 5120])))


# --- replicated IterableDataset streams -------------------------------------------------------------


def iterable_facts(first_batches):
    s = sample(100.0, [proc(MAIN_PID, ROLE_MAIN, [])])
    view = InsideView(loaders=(loader(40, first_batches, workers=(11, 12, 13)),))
    return Facts(mode=MODE_EXIT, sample=s, timeline=(s,), inside=view, exit_code=0)


def test_replicated_streams_are_judged_on_each_workers_first_records_never_on_one_that_yielded_nothing():
    (found,) = [
        d
        for d in diagnose(iterable_facts(((0, "aa/32"), (1, "aa/32"), (2, "bb/4"))))
        if d.kind == "iterable_replicated"
    ]
    assert "replays the same stream" in found.summary and "first 32 records" in found.summary
    assert found.pids == (11, 12)
    # Workers with no record replicate nothing.
    assert "iterable_replicated" not in kinds(iterable_facts(((1, "aa/0"), (2, "aa/0"))))


def test_a_batch_digest_sees_past_its_first_record():
    # Two batches of 16 "images" sharing only their first record: the first 256 values all lie
    # in that record, the others differ.
    a = torch.zeros(16, 3, 16, 16)
    b = a.clone()
    b[1:] = 1.0
    assert FMT.fingerprint(a) != FMT.fingerprint(b)
    assert FMT.fingerprint(a) == FMT.fingerprint(a.clone())


class _IterState:
    """The attributes of ``_MultiProcessingDataLoaderIter`` the recorder reads after ``__next__``
    delivered a batch (torch/utils/data/dataloader.py), as plain values."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def test_a_batch_is_credited_to_the_worker_that_delivered_it_not_to_one_whose_stream_ended():
    # At __next__'s entry main waited for batch 0 of worker 0; worker 0's stream was empty, so
    # PyTorch skipped to batch 1 (worker 1) and delivered it.
    owners = {0: 0, 1: 1, 2: 2, 3: 0}
    after = _IterState(_task_info={2: (2,)}, _rcvd_idx=2, _workers_status=[False, True, True])
    assert FMT._delivered_by(after, owners) == 1
    # Out of order (in_order=False): the one batch of a live worker that left _task_info.
    unordered = _IterState(_task_info={1: (1,)}, _rcvd_idx=0, _in_order=False, _workers_status=[False, True, True])
    assert FMT._delivered_by(unordered, {0: 0, 1: 1, 2: 2}) == 2
