"""``dlwatch show --html`` on a real hang report, loaded in a real headless browser (Debian's
``chromium``, installed by ``.ci/run`` where apt can; the test is skipped without it)."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess

import pytest

from tests.real.helpers import DLWATCH, TERMINATE_AFTER_4_S, TRAIN, reports, run_bounded

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")
def test_the_html_report_renders_in_a_headless_browser(tmp_path):
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2"}  # a rank as torchrun sets it: the headline names it
    code, out, err = run_bounded(
        DLWATCH
        + ["run", *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path), "--"]
        + TRAIN
        + ["--fault", "fork-lock", "--num-workers", "2"],
        120,
        env=env,
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
    # The heading is the text report's first line: proven or suspected, the cause's certainty,
    # the rank; then what became of the hang; the /dev/shm plot says it is the whole machine's.
    with open(os.path.join(folder, "report.txt"), encoding="utf-8") as f:
        first = f.readline().rstrip("\n")
    assert re.match(r"dlwatch: job hung — hang: (proven|suspected); cause: fork_inherited_lock \(", first), first
    assert " — rank 1 of 2 pid " in first, first
    heading = re.search(r'<h1 id="title">(.*?)</h1>', dom)
    assert heading is not None and html.unescape(heading.group(1)) == first, dom[:2000]
    outcome = re.search(r'<p id="outcome"><b>Outcome:</b> (.*?)</p>', dom)
    assert outcome is not None and "ended the job" in html.unescape(outcome.group(1)), dom[:2000]
    assert re.search(r'<img alt="/dev/shm, whole machine[^"]*" src="data:image/png;base64,', dom), dom[:2000]
