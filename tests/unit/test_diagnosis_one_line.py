"""A name the job controls (a folder its files are in, a file, a process name) quoted by a
diagnosis rule stays on its line in every output: a line break in it is written as its escape
(``\\n``, watchdog.diagnose.engine._one_line), so that report.txt gets no line that reads as
dlwatch's own (``FORGED: ...``) and the summary on stderr is not cut at the break."""

from __future__ import annotations

import dataclasses

from tests.unit.builders import MAIN_PID, WORKER_PID, proc, sample
from watchdog.diagnose import diagnose
from watchdog.report import document as report
from watchdog.report import rendering
from watchdog.types import MODE_CRASH, ROLE_MAIN, ROLE_WORKER, Facts, FdCensus, FdKind

# A folder name a job can make: mkdir("/data/x\n\x1b[2J  FORGED: all is well").
EVIL = "/data/x\n\x1b[2J  FORGED: all is well"
ESCAPED = "/data/x\\n\\x1b[2J  FORGED: all is well"


def _facts() -> Facts:
    census = FdCensus(40.0, 240, ((FdKind.FILE, 228), (FdKind.PIPE, 12)), ((EVIL, 228),))
    worker = dataclasses.replace(proc(WORKER_PID, ROLE_WORKER, [], "fork", num_fds=240, rlimit=256), fd_census=census)
    smp = sample(50.0, [proc(MAIN_PID, ROLE_MAIN, []), worker])
    stderr = "OSError: [Errno 24] Too many open files: '/data/x/00231.bin'\n"
    return Facts(mode=MODE_CRASH, sample=smp, timeline=(smp,), stderr_tail=stderr, exit_code=1)


def test_a_folder_name_with_a_line_break_is_escaped_on_its_line_in_the_diagnosis():
    first = diagnose(_facts())[0]
    assert first.kind == "fd_exhausted"
    for text in (first.summary, first.remedy, *first.evidence):
        assert "\n" not in text and "\x1b" not in text, text
    assert ESCAPED in first.summary and ESCAPED in first.remedy
    assert any(ESCAPED in line for line in first.evidence)


def test_report_text_and_short_summary_show_the_folder_escaped_on_one_line():
    facts = _facts()
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": None, "rank": {}, "node": "n"}
    text = report.build(facts, diagnose(facts), job, 1.8e9, "report", None, {}, "crash").text
    lines = text.splitlines()
    assert all("/data/x\\n" in line for line in lines if "FORGED" in line)  # never a line of its own
    assert not any(line.lstrip().startswith(("FORGED", "\\x1b", "[2J")) for line in lines)
    cause = next(line for line in lines if line.lstrip().startswith("cause:"))
    assert "/data/x\\n\\x1b[2J  FORGED: all is well" in cause
    short = rendering.short_summary(text)
    joined = " ".join(part.strip() for part in short.splitlines())  # short_summary wraps long lines
    assert "FORGED: all is well" in joined and "/data/x\\n" in joined
    assert not any(line.lstrip().startswith("FORGED") for line in short.splitlines())


def test_a_report_json_with_a_raw_line_break_in_its_diagnosis_still_renders_on_one_line():
    # as an older dlwatch wrote it (`dlwatch show` renders report.json again)
    facts = _facts()
    job = {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": None, "rank": {}, "node": "n"}
    doc = report.build(facts, diagnose(facts), job, 1.8e9, "report", None, {}, "crash").document
    first = doc["diagnoses"][0]
    first["summary"] = first["remedy"] = first["location"] = "x\n  FORGED: all is well"
    first["evidence"] = ["y\n  FORGED: all is well"]
    lines = list(rendering.text_lines(doc))
    assert not any(line.lstrip().startswith("FORGED") for line in lines)
    assert sum("\\n  FORGED: all is well" in line for line in lines) >= 4
