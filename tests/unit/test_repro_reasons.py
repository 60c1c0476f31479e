"""``dlwatch probe repro`` says why a scenario came out MISDIAGNOSED (issue #38: after a
non-editable install, ``--cases`` printed MISDIAGNOSED twice with no reason: a row with a
report showed the report's folder and hid its note)."""

from __future__ import annotations

from probes import repro


def _scenario():
    return repro.Scenario("some_case", "worker_crash", "crash")


def test_a_misdiagnosed_row_with_a_report_still_says_why():
    o = repro.Outcome(
        _scenario(),
        "misdiagnosed",
        first="hang_unknown",
        kinds=("hang_unknown",),
        report="/r/some_case/reports/x",
        exit_code=1,
        note="first diagnosis hang_unknown; dlwatch exited 1; reports: hang_unknown",
    )
    row = next(line for line in repro.table([o]).splitlines() if line.startswith("some_case"))
    assert "first diagnosis hang_unknown" in row and "report: /r/some_case/reports/x" in row
    assert repro.reasons([o]) == [
        "MISDIAGNOSED some_case: expected worker_crash, first diagnosis hang_unknown: first diagnosis hang_unknown; "
        "dlwatch exited 1; reports: hang_unknown"
    ]
    ok = repro.Outcome(_scenario(), "ok", first="worker_crash", report="/r/x")
    assert repro.reasons([ok]) == [] and "/r/x" in repro.table([ok])


def test_no_report_says_the_job_ended_first_and_what_it_said(tmp_path):
    err = tmp_path / "dlwatch.stderr"
    err.write_text(
        "dlwatch: watching pid 12\nTraceback (most recent call last):\n"
        "ModuleNotFoundError: No module named 'probes.cases'\ndlwatch: the job exited with code 1\n"
    )
    note = repro.failure_note("no crash report", [], (), 1, str(err))
    assert note.startswith(
        "no report written: the job exited 1 before dlwatch wrote any (the job's last line: "
        "ModuleNotFoundError: No module named 'probes.cases')"
    ), note
    assert "dlwatch said: dlwatch: watching pid 12 | dlwatch: the job exited with code 1" in note
    docs = [("/r/x", {"mode": "hang", "diagnoses": [{"kind": "hang_unknown"}]})]
    assert repro.failure_note("first diagnosis hang_unknown", docs, ("hang_unknown",), 1, str(err)).startswith(
        "first diagnosis hang_unknown; dlwatch exited 1"
    )
