"""``dlwatch probe repro`` on a case whose job cannot start says why it is MISDIAGNOSED (issue
#38): no report was written, the job exited first, and its last line. A real ``dlwatch run``."""

from __future__ import annotations

import sys

from tests.real.helpers import run_bounded

SCRIPT = """
import sys
from probes import repro
s = repro.Scenario("nosuch", "worker_crash", "crash", module="probes.cases.no_such_case_xyz", timeout_s=40)
o = repro.run_scenario(s, sys.argv[1])
print(repro.table([o]))
print("\\n".join(repro.reasons([o])))
"""


def test_a_job_that_cannot_start_is_misdiagnosed_with_its_reason(short_tmp_path):
    code, out, err = run_bounded([sys.executable, "-c", SCRIPT, str(short_tmp_path / "w")], timeout_s=90)
    assert code == 0, err[-2000:]
    line = next(x for x in out.splitlines() if x.startswith("MISDIAGNOSED nosuch"))
    assert "no report written: the job exited 1 before dlwatch wrote any" in line, line
    assert "No module named probes.cases.no_such_case_xyz" in line, line
    row = next(x for x in out.splitlines() if x.startswith("nosuch "))
    assert "MISDIAGNOSED" in row and "no report written" in row, row
