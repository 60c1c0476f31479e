"""``dlwatch cluster``'s verdict over hand-built rank rows (no Prometheus): the rank whose
progress stopped first by its node's clock, the lead over the next, a sidecar that went down."""

from __future__ import annotations

from watchdog.cluster import RankRow, first_stalled, render


def _row(node, rank, last, since, up=True, folder=""):
    return RankRow(node, rank, rank, "job42", f"{node}:9400", up, last, since, 10.0, 1.0, "", "", folder)


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
