"""The README's first command: the demo deadlocks a real job, dlwatch proves and names it, ends
the job, and the demo says so. Bounded, and every process group it starts is killed
(``run_bounded``)."""

from __future__ import annotations

import shlex

from tests.real.helpers import PY, reports, run_bounded


def test_the_demo_is_diagnosed_and_prints_what_it_runs_as_it_runs_it(tmp_path):
    code, out, err = run_bounded([PY, "-m", "probes.demo", "--report-dir", str(tmp_path)], timeout_s=300)
    assert code == 0, out + err
    running = next(line for line in out.splitlines() if line.startswith("demo: running "))
    argv = shlex.split(running[len("demo: running ") :])
    # copy-pastable as printed: the interpreter, its flags (-s -P: probes.env.python), then the module
    assert argv[0] == PY and argv[argv.index("-m") :][:3] == ["-m", "watchdog", "run"] and "--" in argv, running
    assert "demo: first diagnosis: fork_inherited_lock" in out and len(reports(str(tmp_path))) == 1, out
