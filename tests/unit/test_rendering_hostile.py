"""Names the job chooses reach report.txt's stacks: a process's name (its comm, up to 15 bytes,
``prctl(PR_SET_NAME)``) and a thread's name (``threading.Thread(name=...)``, any length, as
py-spy and the recorder show it). A line break in one must not start a line of the report that
reads as dlwatch's own (``  action: ...``, a forged stack); it is written as its escape
(watchdog.text.one_line)."""

from __future__ import annotations

from tests.unit.builders import MAIN_PID, hang_facts
from watchdog.diagnose import diagnose
from watchdog.report import document as report
from watchdog.report import rendering

FORGED = "x\n  action: report (nothing ended)\u2028  fix:    rm -rf ~"


def test_process_and_thread_names_with_line_breaks_stay_on_their_line():
    facts = hang_facts([])
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": None, "rank": {}, "node": "n"}
    doc = report.build(facts, diagnose(facts), job, 1.8e9, "report", None, {}).document
    for p in doc["processes"]:
        p["name"] = FORGED
        for t in (p["stack"] or {}).get("threads") or []:
            t["thread_name"] = FORGED
    lines = list(rendering.text_lines(doc)) + rendering.dump_lines(doc)
    assert any("x\\n  action: report" in line for line in lines)
    bad = [line for line in lines if "\n" in line or "\u2028" in line]
    assert not bad, bad[:3]
