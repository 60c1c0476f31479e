"""The distribution as ``pip install .`` lays it out: a wheel built from this tree holds
``watchdog`` and the probes as ``watchdog.probes`` (no top-level ``probes`` in site-packages,
issue: a name that collides with anything), and a probe job started from that layout, in a
folder outside the tree, is watched and diagnosed like one from the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.real.helpers import PY, ROOT, TERMINATE_AFTER_4_S, load_report, reports, run_bounded


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder laid out as site-packages by this tree's wheel (its dependencies are the test
    environment's own)."""
    out = tmp_path_factory.mktemp("wheel")
    tree = out / "tree"  # a copy: building in the clone would leave build/ behind in it
    shutil.copytree(
        ROOT, tree, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__")
    )
    built = subprocess.run(
        [PY, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if built.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {built.stderr.strip()[-300:]}")
    (wheel,) = [n for n in os.listdir(out) if n.endswith(".whl")]
    folder = out / "site"
    with zipfile.ZipFile(out / wheel) as z:
        z.extractall(folder)
        names = z.namelist()
    return folder, names


def test_the_wheel_ships_the_probes_inside_the_watchdog_namespace(site):
    _, names = site
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"watchdog"}, tops
    assert "watchdog/probes/train.py" in names and "watchdog/probes/cases/shm_removed.py" in names
    assert "watchdog/bootstrap/_dlwatch_inside.py" in names and "watchdog/report/schema/report.schema.json" in names


def test_an_installed_probe_job_is_the_watched_job_not_mistaken_for_dlwatch(site, tmp_path):
    folder, _ = site
    env = dict(os.environ, PYTHONPATH=str(folder))  # only the wheel's layout: not this tree
    report_dir = tmp_path / "reports"
    code, _, err = run_bounded(
        [PY, "-m", "watchdog", "run", "--report-dir", str(report_dir), "--interval", "1", *TERMINATE_AFTER_4_S, "--"]
        + [sys.executable, "-m", "watchdog.probes.train", "--fault", "fork-lock", "--num-workers", "2"],
        timeout_s=150,
        cwd=str(tmp_path),
        env=env,
    )
    assert code == 124, err[-2000:]
    (doc,) = [load_report(r) for r in reports(str(report_dir))]
    assert doc["diagnoses"][0]["kind"] == "fork_inherited_lock"
    assert "watchdog.probes.train" in doc["job"]["cmdline"]
    where = doc["diagnoses"][0]["location"]
    assert where.startswith(str(folder)) and where.split(":")[0].endswith("watchdog/probes/train.py"), where
