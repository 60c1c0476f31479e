"""``dlwatch show --html`` of a real ``input_bound`` warning (issue #38): the page, loaded in a
real headless browser (Debian's ``chromium``; skipped without it), shows where the step time
goes, main's data wait and the workers' time stacked, as a table and a plot, with the figures the
warning's own evidence gives. Bounded; every process group started is killed."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess

import pytest

from tests.real.helpers import DLWATCH, PY, ROOT, kill_tree, reports, start, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")
def test_the_html_page_of_an_input_bound_warning_shows_where_the_step_time_goes(tmp_path):
    cfg = tmp_path / "dlwatch.yaml"
    cfg.write_text("warning_interval_s: 2\n")
    out = tmp_path / "r"
    job = [PY, "-m", "probes.cases.input_bound_io_workers", "150"]
    proc = start(DLWATCH + ["run", "--config", str(cfg), "--report-dir", str(out), "--"] + job, cwd=ROOT)
    try:
        (folder,) = wait_for(
            lambda: [f for f in reports(str(out), advice=True) if f.endswith("-warning-input_bound")],
            150,
            "the input_bound warning's report",
            interval_s=1.0,
        )
    finally:
        kill_tree(proc)
    done = subprocess.run(DLWATCH + ["show", "--html", folder], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{done.stdout.strip()}"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    section = dom.split('id="step-time">', 1)[1].split("</div>", 1)[0]
    assert re.search(r'<img alt="Where the step time goes" src="data:image/png;base64,', section), section[:2000]
    rows = {
        (who, part): int(share)
        for who, part, share in re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>(\d+) %</td>", section)
    }
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as f:
        evidence = json.load(f)["diagnoses"][0]["evidence"]
    waited = int(re.search(r"main waited for data (\d+) %", evidence[0]).group(1))
    # the verdict's window and the page's are the same samples: the same share within rounding
    assert abs(rows[("main", "data wait")] - waited) <= 3, (rows, evidence[0])
    workers = {part: share for (who, part), share in rows.items() if who.startswith("workers")}
    assert workers["io"] > 50 and workers["io"] > workers["cpu"], (workers, html.unescape(section))
