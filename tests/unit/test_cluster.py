"""``dlwatch cluster``'s verdict over hand-built rank rows (no Prometheus): the rank whose
progress stopped first by its node's clock, the lead over the next, a sidecar that went down."""

from __future__ import annotations

from watchdog.cluster import RankRow, _of_this_run, first_stalled, render


def _row(node, rank, last, since, up=True, folder="", timeout=None):
    return RankRow(node, rank, rank, "job42", f"{node}:9400", up, last, since, 10.0, 1.0, timeout, report_folder=folder)


def test_the_first_to_stall_is_the_earliest_last_progress_not_the_largest_age():
    rows = [
        _row("node-a", "0", 1000.0, 80.0),  # waits in a collective since 1000
        _row("node-b", "5", 959.0, 70.0, folder="/r/20261202T0000Z-node-b-9-rank5"),  # its age is smaller (skew)
        _row("node-b", "6", 1100.0, 2.0),  # still moving
    ]
    stalled, line = first_stalled(rows, 60.0)
    assert [r.rank for r in stalled] == ["0", "5"]
    assert line.startswith("rank 5 on node-b stalled first (") and "41 s before any other rank" in line
    assert "1 other rank(s) still moving" in line and line.endswith(
        "its report: node-b:/r/20261202T0000Z-node-b-9-rank5"
    )
    assert "stalled" in render(rows, stalled, line) and "moving" in render(rows, stalled, line)


def test_nothing_stalled_says_so_and_a_down_sidecar_is_listed_not_dropped():
    rows = [_row("node-a", "0", 1000.0, 3.0), _row("node-b", "1", 990.0, 5.0, up=False)]
    stalled, line = first_stalled(rows, 60.0)
    assert stalled == [] and line is None
    text = render(rows, stalled, line)
    assert "sidecar down" in text and text.endswith("nothing stalled (2 rank(s))")
    late = [_row("node-b", "1", 990.0, 300.0, up=False)]
    assert first_stalled(late, 60.0)[1].endswith("its sidecar no longer answers")


def test_a_rank_is_stalled_by_its_own_sidecars_stall_timeout_unless_told_otherwise():
    rows = [_row("node-a", "0", 1000.0, 22.0, timeout=5.0), _row("node-b", "1", 1010.0, 22.0)]
    assert [r.rank for r in first_stalled(rows)[0]] == ["0"]  # node-b's sidecar served none: 60 s
    assert [r.rank for r in first_stalled(rows, 10.0)[0]] == ["0", "1"]


def test_a_report_of_an_earlier_run_on_the_same_node_is_not_this_runs():
    started = 1796187600.0  # 2026-12-02 05:00:00 UTC
    assert _of_this_run("/r/20261202T050003Z-vm-9-rank1", started)
    assert not _of_this_run("/r/20261202T045925Z-vm-14233", started)
    assert _of_this_run("/r/20261202T045925Z-vm-14233", None) and _of_this_run("/r/odd-name", started)


def test_a_bad_prometheus_url_is_one_line_naming_it_without_its_password():
    import pytest

    from watchdog.cluster import ClusterError, _shown, query

    assert _shown("http://alice:s3cret@prom:9090/") == "http://alice:…@prom:9090/"
    for url in ("ftp://prom", "prom:9090", "http://"):
        with pytest.raises(ClusterError, match="not an http:// or https:// URL"):
            query(url, "up")
    with pytest.raises(ClusterError) as e:
        query("http://alice:s3cret@127.0.0.1:1", "up", timeout_s=2)
    assert "s3cret" not in str(e.value) and "cannot be reached" in str(e.value)


def test_a_run_id_may_hold_what_torchrun_rdzv_ids_hold_but_nothing_that_breaks_the_query():
    import pytest

    from watchdog.cluster import ClusterError, collect
    from watchdog.collect.discovery import RUN_ID_VALUE

    for run_id in ("job42", "slurm-1234.0", "alice@node-a", "team/exp-7", "a+b=c"):
        assert RUN_ID_VALUE.match(run_id), run_id
        with pytest.raises(ClusterError, match="cannot be reached"):  # accepted: the query was tried
            collect("http://127.0.0.1:1", run_id)
    for run_id in ('a"}or{x="', "a\\b", "two words", "", "x" * 129):
        with pytest.raises(ClusterError, match="not a run id"):
            collect("http://127.0.0.1:1", run_id)
