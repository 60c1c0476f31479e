"""The diagnosis catalogue: one real reproduction per kind that a CPU machine can produce (run
under ``dlwatch`` by ``probes.repro``, bounded, process groups killed) and a coverage meta-test.
The kinds that need a GPU or have no known CPU reproduction have fixture tests in
``tests/unit/test_diagnose.py``."""

from __future__ import annotations

import os
import re

import pytest

from probes import repro
from tests.real.helpers import ROOT, load_report, reports
from watchdog.diagnose import RULES

# Scenarios that run a probes.cases target are exercised, with their verdicts, by test_cases.py.
RUNNABLE = [s.name for s in repro.SCENARIOS if not s.skip and not s.module.startswith("probes.cases.")]


@pytest.mark.parametrize("name", RUNNABLE)
def test_reproduction_is_diagnosed(name, tmp_path):
    s = repro.BY_NAME[name]
    outcome = repro.run_scenario(s, str(tmp_path))
    if outcome.status == "skipped":
        pytest.skip(outcome.note)
    assert outcome.status == "ok", (outcome.first, outcome.kinds, outcome.note)
    assert outcome.latency_s is not None and outcome.latency_s < 60
    for folder in reports(os.path.join(str(tmp_path), "reports")):
        load_report(folder)  # every report written conforms to watchdog/report/schema/report.schema.json
    if s.module == "probes.train" and outcome.report:
        # Every report of a probes.train job carries the inside view: batches, data wait, intervals.
        with open(os.path.join(outcome.report, "report.txt"), encoding="utf-8") as f:
            text = f.read()
        assert "DataLoader (inside view):" in text, text[:3000]
        if "no DataLoader iterator recorded yet" not in text:  # a warning may come before the first iterator
            assert (" batches (epoch " in text or " 1 batch (epoch " in text) and "data wait" in text, text[:3000]


def test_every_catalogue_kind_has_a_scenario_a_rule_and_a_readme_row():
    kinds = {r.kind for r in RULES}
    expected = {s.expected for s in repro.SCENARIOS if s.expected is not None}  # None: a healthy control
    expected |= {kind for s in repro.SCENARIOS for kind in s.also}  # checked among a report's findings
    assert expected <= kinds
    assert kinds - expected == set()
    with open(os.path.join(ROOT, "docs", "failure-classes.md"), encoding="utf-8") as f:
        catalogue = f.read()
    for kind in kinds | {"unknown"}:
        assert re.search(rf"^\| `{kind}` \|", catalogue, re.M), f"docs/failure-classes.md lacks a row for {kind}"
