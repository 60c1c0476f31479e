"""``dlwatch show --html`` on a report.json that holds a lone surrogate (``"\\udcff"``: JSON
allows it; report.json carries a process name that is not UTF-8 that way, and anyone may hand
``show`` a hand-made one): the page is written, the surrogate escaped, and no temporary file is
left behind. Before: UnicodeEncodeError's traceback from browse._write_in and a
``.report.html.XXXXXXXX`` left in the folder."""

from __future__ import annotations

import json
import os

from tests.unit.builders import MAIN_PID, hang_facts
from watchdog.diagnose import diagnose
from watchdog.report import browse, writer
from watchdog.report import document as report


def test_show_html_writes_a_report_whose_json_holds_a_surrogate(tmp_path):
    facts = hang_facts([])
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": None, "rank": {}, "node": "n"}
    folder = writer.write(report.build(facts, diagnose(facts), job, 1.8e9, "report", None, {}), str(tmp_path))
    path = os.path.join(folder, "report.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc["diagnoses"][0]["summary"] = "bad\udcff\ud800 name"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)  # ensure_ascii: written as \udcff, valid JSON
    page = browse.write_html(folder)
    with open(page, encoding="utf-8") as f:
        assert "bad\\udcff\\ud800 name" in f.read()
    assert not [n for n in os.listdir(folder) if n.startswith(".report.html")]
