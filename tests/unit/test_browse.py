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
        {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": None, "rank": {"RANK": "1"}},
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
