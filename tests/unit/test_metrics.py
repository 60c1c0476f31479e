"""The metrics endpoint's series, built from hand-made watcher statuses (no server, no job):
labels for a job across nodes, the wall-clock time of the last progress, one info series per
report."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.builders import MAIN_PID, WORKER_PID, proc, sample
from watchdog.types import ROLE_MAIN, ROLE_WORKER, ReportWritten, WatcherStatus
from watchdog.watch import metrics

RANK_VARS = (("GROUP_RANK", "1"), ("LOCAL_RANK", "0"), ("RANK", "2"), ("TORCHELASTIC_RUN_ID", "job42"))


def _scrape(collector) -> dict:
    """``{(series name, {label: value} as sorted tuples): value}`` of one scrape, parsed back by
    prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    registry.register(collector)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _labels(**kw):
    return tuple(sorted(kw.items()))


RANK = dict(node="node-b", run_id="job42", rank="2", local_rank="0", group_rank="1")


def test_every_series_names_its_node_and_a_ranks_torchrun_identity_never_a_pid():
    smp = sample(
        30.0, [proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_WORKER, [])], shm_total=1 << 26, shm_used=0
    )
    status = WatcherStatus(rank="2", root_pid=MAIN_PID, rank_vars=RANK_VARS, sample=smp, stall_s=12.5)
    collector = metrics.JobMetrics(lambda: [status], node="node-b")
    folder = "/reports/20261202T040000Z-9-rank2"
    collector.note_report(ReportWritten("hang", "worker_stuck", "2", "hang", folder, RANK_VARS))
    got = _scrape(collector)
    assert got[("dlwatch_seconds_since_progress", _labels(**RANK))] == 12.5
    # the wall clock of the last progress: the sample's wall time less the stall, comparable across nodes
    assert got[("dlwatch_last_progress_timestamp_seconds", _labels(**RANK))] == smp.wall - 12.5
    assert ("dlwatch_process_resident_memory_bytes", _labels(**RANK, role="main", worker_id="")) in got
    assert ("dlwatch_shm_size_bytes", _labels(node="node-b")) in got
    info = _labels(**RANK, mode="hang", kind="worker_stuck", severity="hang", folder=folder)
    assert got[("dlwatch_report_info", info)] == 1
    assert got[("dlwatch_reports_total", _labels(node="node-b", rank="2", mode="hang", kind="worker_stuck"))] == 1
    labels = {k for _, ls in got for k, _ in ls}
    assert "pid" not in labels and str(MAIN_PID) not in {v for _, ls in got for _, v in ls if v != folder}


def test_a_single_process_job_has_empty_rank_labels_and_the_host_name_by_default():
    import socket

    smp = sample(30.0, [proc(MAIN_PID, ROLE_MAIN, [])])
    got = _scrape(metrics.JobMetrics(lambda: [WatcherStatus(root_pid=MAIN_PID, sample=smp, stall_s=1.0)]))
    empty = dict(node=socket.gethostname(), run_id="", rank="", local_rank="", group_rank="")
    assert got[("dlwatch_seconds_since_progress", _labels(**empty))] == 1.0


def readme_series() -> dict:
    """docs/metrics.md's table of series: ``{name: {label, …}}``."""
    import os
    import re

    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "metrics.md"), encoding="utf-8").read()
    rows = re.findall(r"^\| `(dlwatch_\w+)` \| (\w+) \| ([^|]+) \|", readme, re.M)
    table = {}
    for name, _kind, labels in rows:
        words = labels.replace("rank labels", "node, run_id, rank, local_rank, group_rank")
        table[name] = set(re.findall(r"[a-z_]+", re.sub(r"\([^)]*\)", "", words)))
    return table


def test_the_readme_lists_every_series_the_endpoint_serves_with_its_labels():
    import re
    from dataclasses import replace

    from tests.unit.test_verify import loader_view
    from watchdog.diagnose.throughput import Judgement, Verdict
    from watchdog.types import Frame

    table = readme_series()
    smp = sample(
        30.0,
        [replace(proc(MAIN_PID, ROLE_MAIN, []), pss_bytes=1 << 20), proc(WORKER_PID, ROLE_WORKER, [])],
        shm_total=1 << 26,
        shm_used=0,
    )
    loader = replace(loader_view(MAIN_PID, 1, 5), site=Frame("main", "/job/train.py", 12, False))
    status = WatcherStatus(
        rank="2",
        root_pid=MAIN_PID,
        rank_vars=RANK_VARS,
        sample=replace(smp, loaders=(loader,)),
        stall_s=3.0,
        delivered=((loader.site, 30),),
        input_verdict=Judgement(Verdict.CPU_BOUND, "input-bound"),
        worker_seconds=(("0", "cpu", 12.0), ("0", "idle", 3.0)),
    )
    collector = metrics.JobMetrics(lambda: [status], node="n", stall_timeout_s=5.0)
    collector.note_report(ReportWritten("hang", "worker_stuck", "2", "hang", "/r", RANK_VARS))
    served = {}
    for name, labels in _scrape(collector):
        base = re.sub(r"_(total|created)$", "", name)
        key = base + "_total" if base + "_total" in table else base
        served.setdefault(key, set()).update(k for k, _ in labels)
    assert set(served) - set(table) == set(), "served but not in docs/metrics.md's table"
    missing = set(table) - set(served) - {"dlwatch_process_unique_memory_bytes", "dlwatch_process_pinned_memory_bytes"}
    assert missing == set(), "in docs/metrics.md's table but not served"
    for name, labels in served.items():
        assert labels == table[name], (name, labels, table[name])
    scraped = _scrape(collector)
    delivered = [v for (name, ls), v in scraped.items() if name == "dlwatch_loader_batches_delivered_total"]
    assert delivered == [30.0] and ("loader", "train.py:12") in next(
        ls for (name, ls) in scraped if name == "dlwatch_loader_batches_delivered_total"
    )


def _loader_status(t: float, **view) -> WatcherStatus:
    from dataclasses import replace

    from tests.unit.test_verify import loader_view
    from watchdog.types import Frame

    loader = replace(loader_view(MAIN_PID, 1, 5), site=Frame("main", "/job/train.py", 12, False), **view)
    smp = replace(sample(t, [proc(MAIN_PID, ROLE_MAIN, [])]), loaders=(loader,))
    return WatcherStatus(root_pid=MAIN_PID, sample=smp, stall_s=1.0)


def _data_wait(status: WatcherStatus) -> float:
    (value,) = [
        v for (name, _), v in _scrape(metrics.JobMetrics(lambda: [status], node="n")).items() if "data_wait" in name
    ]
    return value


def test_the_data_wait_counts_the_wait_in_progress_so_it_rises_through_a_stall():
    # main entered __next__ at t=100 for a batch worker 1 owns, and waited 4 s before that:
    # at the samples of t=130 and t=160 the series says 34 s, then 64 s (it said 4 s at both)
    waiting = dict(wait_s=4.0, waiting_since=100.0, waiting_worker=1, waiting_idx=6)
    assert _data_wait(_loader_status(130.0, **waiting)) == 34.0
    assert _data_wait(_loader_status(160.0, **waiting)) == 64.0
    # an epoch that ended leaves waiting_since set with no worker (-1): not a wait
    assert _data_wait(_loader_status(160.0, wait_s=4.0, waiting_since=100.0, waiting_worker=-1)) == 4.0
    assert _data_wait(_loader_status(160.0, wait_s=4.0)) == 4.0


def test_pss_is_served_and_a_report_folder_is_absolute(tmp_path, monkeypatch):
    import os
    from dataclasses import replace

    monkeypatch.chdir(tmp_path)
    smp = sample(30.0, [replace(proc(MAIN_PID, ROLE_MAIN, []), rss_bytes=3 << 20, pss_bytes=1 << 20)])
    collector = metrics.JobMetrics(lambda: [WatcherStatus(root_pid=MAIN_PID, sample=smp, stall_s=1.0)], node="n")
    collector.note_report(ReportWritten("hang", "worker_stuck", "", "hang", "dlwatch-reports/20261202T040000Z-n-9"))
    got = _scrape(collector)
    empty = dict(node="n", run_id="", rank="", local_rank="", group_rank="")
    assert got[("dlwatch_process_proportional_memory_bytes", _labels(**empty, role="main", worker_id=""))] == 1 << 20
    (folder,) = [dict(ls)["folder"] for name, ls in got if name == "dlwatch_report_info"]
    assert folder == os.path.join(str(tmp_path), "dlwatch-reports", "20261202T040000Z-n-9")
