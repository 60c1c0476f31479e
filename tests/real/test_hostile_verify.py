"""``dlwatch verify`` beside code it must not run: a report's job ran in a folder that holds a
``json.py`` (planted by the job or by another local user), or that another user owns or can
write into. verify must import nothing from there and refuse a folder it cannot trust, with one
line and exit code 2 (issue #33, item 1). The reports are written by the test, as dlwatch writes
them; every run is bounded (``helpers.run_bounded`` kills its process group)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from tests.real.helpers import DLWATCH, plant_report, run_bounded

PLANT = "import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'IMPORTED'), 'w').write('x')\n"


def _report(tmp_path, cwd) -> str:
    """A hang report of a job that ran ``python -I -c pass`` in ``cwd``, with a fix verify can
    apply (``num_workers=0`` on every loader), in a private folder of the caller's."""
    return plant_report(
        tmp_path / "reports",
        [sys.executable, "-I", "-c", "pass"],
        cwd,
        "worker_stuck",
        fix={"loader": {"num_workers": 0}},
    )


def _job_folder(tmp_path, mode: int):
    os.chmod(tmp_path, 0o755)
    job = tmp_path / "job"
    job.mkdir()
    for name in ("json.py", "yaml.py", "psutil.py"):
        (job / name).write_text(PLANT)
    os.chmod(job, mode)
    return job


def test_verify_imports_nothing_from_the_jobs_working_directory(tmp_path):
    job = _job_folder(tmp_path, 0o755)  # the caller's own folder; the job itself wrote json.py there
    folder = _report(tmp_path, job)
    code, out, err = run_bounded(
        DLWATCH + ["verify", folder, "--all-loaders", "--runs", "1", "--seconds", "5", "--max-run-s", "60"],
        timeout_s=240,
        cwd="/",
    )
    assert code in (0, 1), (code, out, err[-2000:])  # it ran (the control did not hang: "not proven")
    assert "run 2/2" in out, out
    assert not (job / "IMPORTED").exists(), "dlwatch verify imported a module from the job's working directory"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)
def test_verify_refuses_a_working_directory_another_user_owns_or_can_write(attacker, tmp_path):
    job = _job_folder(tmp_path, 0o1777)  # a shared sticky folder: anyone can drop a json.py there
    folder = _report(tmp_path, job)
    code, out, err = run_bounded(DLWATCH + ["verify", folder, "--all-loaders"], timeout_s=120, cwd="/")
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, out, err)
    assert "writable by others" in err and str(job) in err, err
    os.chmod(job, 0o755)
    os.chown(job, attacker.pw_uid, attacker.pw_gid)  # re-made by another user, 0755 and theirs
    code, out, err = run_bounded(DLWATCH + ["verify", folder, "--all-loaders"], timeout_s=120, cwd="/")
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, out, err)
    assert f"belongs to uid {attacker.pw_uid}" in err, err
    assert not (job / "IMPORTED").exists()
