"""The inside view's folder is written by the job, which a root dlwatch does not trust (NOTE [ What
the job writes ] in watchdog/collect/inside.py). Here a real job under ``dlwatch run`` (its inside view on, the default)
plays the attacker on its own folder, then deadlocks: the deadlock must still be reported."""

from __future__ import annotations

import resource
import subprocess

from tests.real.helpers import DLWATCH, PY, TERMINATE_AFTER_4_S, kill_tree, load_report, reports, start

# The job: 1,100 other names of its own counters' file (leading zeros, and digits of other
# scripts, which int() reads as the same pid), each a file the reader of today's main held a
# descriptor for, then probes.train's fork deadlock (every worker blocks on a lock held at fork).
_JOB = r"""
import os, runpy, sys
folder, pid = os.environ["DLWATCH_HOOK_DIR"], str(os.getpid())
names = []
for lead in range(236):
    for zero in (0x30, 0x660, 0x966, 0xFF10, 0x9E6):
        name = "0" * lead + "".join(chr(zero + int(d)) for d in pid)
        if name != pid:
            names.append(name)
for name in names[:1100]:
    with open(os.path.join(folder, name + ".bin"), "wb") as f:
        f.write(b"\0" * 64)
sys.argv = ["probes.train", "--fault", "fork-lock", "--num-workers", "2"]
runpy.run_module("probes.train", run_name="__main__")
"""


def _nofile_1024() -> None:
    """In the child before exec: the usual default soft limit of descriptors (1,024)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))


def test_a_deadlock_is_reported_although_the_job_planted_1100_counter_files(tmp_path):
    report_dir = str(tmp_path / "reports")
    cmd = DLWATCH + ["run", "--report-dir", report_dir, "--interval", "1", *TERMINATE_AFTER_4_S]
    proc = start([*cmd, "--", PY, "-c", _JOB], preexec_fn=_nofile_1024)
    try:
        _out, err = proc.communicate(timeout=120)  # a hang proven and ended takes ~15 s
    except subprocess.TimeoutExpired:  # the code of 2026-12-04: every sample failed (EMFILE), nothing reported
        kill_tree(proc)
        _out, err = proc.communicate(timeout=30)
    finally:
        kill_tree(proc)
    found = reports(report_dir)
    assert found, f"no report; dlwatch said: {err[-3000:]}"
    kinds = [d["kind"] for d in load_report(found[0])["diagnoses"]]
    assert kinds[0] == "fork_inherited_lock", (kinds, err[-3000:])
    assert "Too many open files" not in err
