"""Reading reports back (``dlwatch reports``, ``show``, ``show --html``) on a report written
here by the report builder and writer from captured fixtures."""

from __future__ import annotations

import os

import pytest

from tests.unit.builders import MAIN_PID, hang_facts
from watchdog import browse, html, report, writer
from watchdog.diagnose import diagnose
from watchdog.errors import ReportNotFound


def _written(tmp_path):
    facts = hang_facts([])
    rep = report.build(
        facts,
        diagnose(facts),
        {
            "pid": MAIN_PID,
            "cmdline": ["python", "train.py"],
            "start_time": None,
            "rank": {"RANK": "1"},
            "node": "node-a",
        },
        1.8e9,
        "report",
        None,
        {},
    )
    return writer.write(rep, str(tmp_path))


def test_reports_are_listed_newest_first_with_kind_rank_and_action(tmp_path):
    folder = _written(tmp_path)
    (tmp_path / ".half-written").mkdir()
    table, n = browse.listing(str(tmp_path))
    assert n == 1 and os.path.basename(folder) in table and " 1 " in table and "hang (" in table
    with pytest.raises(ReportNotFound):
        browse.listing(str(tmp_path / "nope"))


def test_show_prints_the_summary_and_refuses_a_folder_that_is_not_a_report(tmp_path):
    folder = _written(tmp_path)
    summary = browse.text(folder)
    assert summary.startswith("dlwatch: job hung") and report.STACKS_HEADING not in summary
    assert report.STACKS_HEADING in browse.text(folder, full=True)
    with pytest.raises(ReportNotFound):
        browse.text(str(tmp_path))


def test_the_html_page_is_self_contained_with_plots_and_collapsible_stacks(tmp_path):
    folder = _written(tmp_path)
    page = html.render(browse.load(folder), browse.text(folder, full=True))
    assert page.startswith("<!DOCTYPE html>") and 'id="evidence"' in page and "<details>" in page
    assert 'src="http' not in page and "<link" not in page and "<script" not in page  # nothing to fetch
    pytest.importorskip("matplotlib")
    assert page.count('src="data:image/png;base64,') >= 3
    path = browse.write_html(folder)
    assert path.endswith("report.html") and os.stat(path).st_mode & 0o777 == 0o600


def test_a_hand_edited_report_is_one_unreadable_row_not_a_crash(tmp_path):
    import json

    folder = _written(tmp_path)
    path = os.path.join(folder, "report.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for bad in (5, True, [1], {"a": 1}):
        doc["detected_at"] = bad
        doc["job"] = bad if isinstance(bad, list) else doc["job"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        table, n = browse.listing(str(tmp_path))
        assert n == 1 and os.path.basename(folder) in table


def test_the_html_page_never_replaces_a_device_a_fifo_or_a_link(tmp_path):
    folder = _written(tmp_path / "r")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    for out in ("/dev/null", str(fifo), str(link)):
        with pytest.raises(ReportNotFound, match="not a regular file"):
            browse.write_html(folder, out)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert link.is_symlink() and not (tmp_path / "elsewhere").exists()
    page = browse.write_html(folder, str(tmp_path / "page.html"))
    assert os.path.isfile(page)


def test_show_out_without_html_and_a_nan_timeout_are_usage_errors(capsys):
    from probes import cli as probes_cli
    from watchdog import cli

    assert cli.main(["show", "somewhere", "--out", "x.html"]) == 2
    assert "--out" in capsys.readouterr().err
    for command in ("rhythm", "hook-cost"):
        for bad in ("nan", "-1", "0", "1e999"):
            with pytest.raises(SystemExit) as e:
                probes_cli.main([command, "--timeout", bad])
            assert e.value.code == 2
            err = capsys.readouterr().err
            assert "--timeout" in err and err.count("\n") == 1


def test_show_takes_the_report_txt_path_dlwatch_prints(tmp_path, capsys):
    from watchdog import cli

    folder = _written(tmp_path)
    assert browse.report_folder(os.path.join(folder, "report.txt")) == folder
    assert browse.report_folder(folder) == folder
    assert cli.main(["show", os.path.join(folder, "report.txt")]) == 0
    assert capsys.readouterr().out.startswith("dlwatch: job hung")


def test_a_hang_s_outcome_is_listed_and_shown_after_its_headline(tmp_path):
    folder = _written(tmp_path)
    table, _ = browse.listing(str(tmp_path))
    assert "OUTCOME" in table.splitlines()[0] and " - " in table.splitlines()[2]  # a hang, no outcome yet
    writer.write_outcome(folder, {"outcome": "resolved", "summary": "resolved after 41 s", "resolved_after_s": 41.2})
    writer.write_outcome(folder, {"outcome": "job_ended", "summary": "the job ended with exit code 1", "exit_code": 1})
    table, _ = browse.listing(str(tmp_path))
    assert "job ended (exit 1)" in table  # the later outcome replaced the earlier one
    assert oct(os.stat(os.path.join(folder, writer.OUTCOME_FILE)).st_mode & 0o777) == "0o600"
    assert [n for n in os.listdir(folder) if n.startswith(".")] == []  # no temporary file left
    lines = browse.text(folder).splitlines()
    assert lines[0].startswith("dlwatch: job hung") and lines[1].startswith("  outcome: the job ended with exit code 1")


def test_a_verified_fix_is_listed_with_the_outcome_and_shown_with_its_runs(tmp_path):
    folder = _written(tmp_path)
    writer.write_outcome(folder, {"outcome": "terminated", "summary": "dlwatch ended the job"})
    verdict = "the fix holds: with multiprocessing_context='forkserver' 3/3 run(s) passed batch 74"
    writer.write_verify(folder, {"holds": True, "verdict": verdict, "folder": "/r/verify-1"})
    table, _ = browse.listing(str(tmp_path))
    assert "terminated; fix holds" in table
    lines = browse.text(folder).splitlines()
    assert lines[1].startswith("  outcome: dlwatch ended the job")
    assert lines[2] == f"  verify: {verdict} (runs: /r/verify-1)"
    assert oct(os.stat(os.path.join(folder, writer.VERIFY_FILE)).st_mode & 0o777) == "0o600"
    writer.write_verify(folder, {"holds": False, "verdict": "not proven: the control did not hang in 1 run(s)"})
    assert "terminated; fix not proven" in browse.listing(str(tmp_path))[0]


def test_the_html_page_of_a_verified_report_links_to_its_runs(tmp_path):
    pytest.importorskip("matplotlib")
    folder = _written(tmp_path)
    runs = os.path.join(str(tmp_path), "verify-20261202T000000Z-1")
    writer.write_verify(folder, {"holds": True, "verdict": "the fix holds: <3/3>", "folder": runs})
    page = open(browse.write_html(folder), encoding="utf-8").read()
    assert '<p id="verify"><b>Verify:</b> the fix holds: &lt;3/3&gt;.' in page
    assert 'href="../verify-20261202T000000Z-1/"' in page


def _stalled_doc():
    """A report document whose timeline has main waiting 6 s for a batch after two came."""
    loaders = [[100, 1, 0, 2, 0.5, None]] * 3 + [[100, 1, 0, 2, 0.5, w] for w in (1.0, 3.0, 6.0)]
    timeline = [
        {
            "t_mono": 10.0 + i,
            "shm_used_bytes": 0,
            "loaders": [loaders[i]],
            "processes": [{"role": "main", "pid": 100, "cpu_s": 0.1 * i, "rss_bytes": 2**20, "uss_bytes": None}],
        }
        for i in range(6)
    ]
    return {"timeline": timeline, "stall": {"stall_s": 3.0}}


def test_the_data_wait_plot_rises_through_a_stall():
    _, _, _, loaders = html._series(_stalled_doc())
    waits = [w for _, _, w in loaders["pid 100 iterator 1"]]
    assert waits == [0.5, 0.5, 0.5, 1.5, 3.5, 6.5]  # the wait in progress counts: not flat at 0.5


def test_an_empty_or_flat_plot_has_a_zero_based_axis_not_a_tiny_one():
    assert html.y_range([]) == (0.0, 1.0)
    assert html.y_range([("shm", [(0.0, 0.0), (1.0, 0.0)], "-")]) == (0.0, 1.0)
    assert html.y_range([("a", [(0.0, 2.0)], "-"), ("b", [(0.0, 10.0)], "-")]) == (0.0, 11.0)


def test_every_plot_puts_its_x_axis_at_the_same_place(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    spines = set()
    for title, png in html.plots(_stalled_doc()):
        path = tmp_path / "p.png"
        path.write_bytes(png)
        dark = matplotlib.image.imread(str(path))[:, :, :3].sum(axis=2) < 0.6
        columns = tuple(x for x in range(dark.shape[1]) if dark[:, x].mean() > 0.5 * html.AXES[3])
        assert columns, title  # the axes' left and right spines: dark most of the axes' height
        spines.add(columns)
    assert len(spines) == 1, spines


def test_report_folders_name_their_node_so_nodes_sharing_a_report_dir_never_collide():
    from watchdog import report as report_mod

    wall = 1796180000.0  # 2026-12-02 02:53:20 UTC
    assert report_mod.folder_name(wall, 42, "node-b") == "20261202T025320Z-node-b-42"
    assert report_mod.folder_name(wall, 42, "node-a") != report_mod.folder_name(wall, 42, "node-b")
    assert report_mod.folder_name(wall, 42, "../x/y") == "20261202T025320Z-_x_y-42"  # one plain path component
    assert report_mod.folder_name(wall, 42) == "20261202T025320Z-42"


def test_the_reports_table_has_a_node_column(tmp_path):
    folder = _written(tmp_path)
    table, n = browse.listing(str(tmp_path))
    header = table.splitlines()[0].split()
    assert n == 1 and header[:4] == ["TIME", "(UTC)", "NODE", "JOB"]
    assert browse.load(folder)["job"]["node"] == "node-a"
    assert "node-a" in table.splitlines()[2] and "-node-a-" in os.path.basename(folder)


def test_reports_takes_the_folder_as_run_does_with_report_dir(tmp_path, capsys):
    from watchdog import cli

    _written(tmp_path)
    assert cli.main(["reports", "--report-dir", str(tmp_path)]) == 0
    assert "node-a" in capsys.readouterr().out
    assert cli.main(["reports", str(tmp_path), "--report-dir", str(tmp_path / "other")]) == 2
    assert "differ: give one" in capsys.readouterr().err
