"""``dlwatch show --html`` on a real hang report, loaded in a real headless browser (Debian's
``chromium``, installed by ``.ci/run`` where apt can; the test is skipped without it)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.real.helpers import DLWATCH, TERMINATE_AFTER_4_S, TRAIN, reports, run_bounded

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")
def test_the_html_report_renders_in_a_headless_browser(tmp_path):
    code, out, err = run_bounded(
        DLWATCH
        + ["run", *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path), "--"]
        + TRAIN
        + ["--fault", "fork-lock", "--num-workers", "2"],
        120,
    )
    assert code == 124, err
    (folder,) = reports(str(tmp_path))
    done = subprocess.run(DLWATCH + ["show", "--html", folder], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = done.stdout.strip()
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{page}"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "fork_inherited_lock" in dom and dom.count("<li>") >= 3
    assert (
        len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', dom)) >= 5
    )  # CPU, memory, fds, /dev/shm, batches
    assert dom.count("<details") >= 3  # main and both workers' stacks
