"""Jobs modelled on public bug reports (``probes/cases/``), each run for real under
``dlwatch run`` with a 5 s stall timeout and ``on_hang: terminate``, and the verdict each must
get (``probes.cases.CASES``): the right kind first, proven or suspected as it should be, the
right line; the healthy controls never reported and never ended. Each run is bounded and every
process group it starts is killed (``probes.repro.run_scenario``).

The cases: probes/cases/openmp_pool_after_fork.py, thread_pool_before_fork.py,
lock_order_in_worker.py, lock_held_across_iter.py, mp_queue_nothing_feeds.py, mp_event_never_set.py,
main_join_prefetch_thread.py, exit_hang_queue_feeder.py, fd_exhausted_in_workers.py,
stdout_reader_gone.py, summary_writer_and_deadlock.py, loader_timeout_slow_batch.py,
dataset_exception_len_lies.py, collate_object_field.py, worker_init_fn_raises.py,
worker_segfault_mid_epoch.py, worker_execs_program.py, memmap_truncated_under_workers.py, worker_cache_oom_in_cgroup.py,
nested_pool_in_worker.py, spawn_without_main_guard.py, shm_removed.py, shm_leaked_after_kill.py,
map_count_exhausted.py, copy_on_read_index.py, live_display_lock_at_fork.py, taskset_one_cpu.py,
iterable_not_sharded.py, rng_copied_into_workers.py, uneven_shards_mp_spawn.py,
sqlite_busy_retry.py, node_barrier_stale_world.py, pipe_command_store_silent.py,
child_waits_on_stdin.py, fuse_daemon_silent.py, forkserver_preload_lock.py
fd_exhausted_by_open_files.py, main_keeps_batches_shm.py, shm_full_labels_lost.py, main_keeps_graphs_oom.py, and the
healthy_*.py controls
(healthy_terminal_prompt.py is also
driven through a terminal in test_terminal.py). The ``*_attach`` entries run a target with
plain ``python`` under ``dlwatch attach --pid`` (no inside view: the main-wait measure).
"""

from __future__ import annotations

import os

import pytest

from probes import cases, repro
from tests.real.helpers import ROOT, load_report, reports

TERMINATED = 124


@pytest.mark.parametrize("name", [c.name for c in cases.CASES])
def test_case_gets_its_verdict(name, tmp_path):
    case = cases.BY_NAME[name]
    outcome = repro.run_scenario(repro.from_case(case), str(tmp_path))
    assert outcome.status == "ok", (outcome.first, outcome.kinds, outcome.note)
    if case.kind is None:
        assert outcome.exit_code == 0
        for folder in reports(os.path.join(str(tmp_path), "reports")):
            assert load_report(folder)["action"] == "report", folder  # a healthy job is never ended
        return
    doc = load_report(outcome.report)
    warned = {
        d["diagnoses"][0]["kind"]
        for d in map(load_report, reports(os.path.dirname(outcome.report)))
        if d["mode"] == "live"
    }
    assert set(case.warnings) <= warned, warned
    if doc["action"] == "terminate":  # on_hang=terminate ends a job only on a proof (issue #34)
        assert doc["stall"]["certainty"] == "proven", (doc["stall"], doc["action_note"])
    if case.mode == "hang":
        assert doc["mode"] == "hang" and doc["diagnoses"][0]["severity"] in ("hang", "crash")
        assert report_header(outcome.report).startswith("dlwatch: job hung")


def report_header(folder: str) -> str:
    with open(os.path.join(folder, "report.txt"), encoding="utf-8") as f:
        return f.readline()


def test_every_case_target_is_in_the_index_and_never_imports_the_watchdog():
    folder = os.path.join(ROOT, "probes", "cases")
    targets = {n[:-3] for n in os.listdir(folder) if n.endswith(".py") and n != "__init__.py"}
    assert targets == {c.module.rsplit(".", 1)[1] for c in cases.CASES}
    for name in targets:
        with open(os.path.join(folder, name + ".py"), encoding="utf-8") as f:
            text = f.read()
        assert "import watchdog" not in text and "from watchdog" not in text, name
        assert "Run: ``python -m probes.cases." in text, name
