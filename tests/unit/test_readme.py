"""The README's YAML blocks: each parses, and a Prometheus rules file among them passes
``promtool check rules`` and behaves as it says under ``promtool test rules`` (a single-process
job, whose ``rank`` label is empty, and one rank of a multi-rank job). Without ``promtool`` (the
``prometheus`` Debian package) the promtool part is skipped, with a message."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from tests.unit.builders import ROOT


def _yaml_blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)


def _rules_block():
    (block,) = [b for b in _yaml_blocks() if "groups:" in b]
    return block


def test_every_yaml_block_of_the_readme_parses():
    blocks = _yaml_blocks()
    assert blocks
    for block in blocks:
        assert yaml.safe_load(block) is not None, block


# Two stalls: a single-process job (rank label empty) and rank 3 of a job; each past 300 s for 2m.
_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'dlwatch_seconds_since_progress{instance="node7:9400", rank=""}'
        values: '200+15x40'
      - series: 'dlwatch_seconds_since_progress{instance="node8:9400", rank="3"}'
        values: '200+15x40'
      - series: 'dlwatch_reports_total{instance="node7:9400", rank="", mode="hang", kind="worker_stuck"}'
        values: '_ _ _ 1 1 1 1 1 1 1'  # the series appears with the first report, at 1
    alert_rule_test:
      - eval_time: 10m
        alertname: DataLoaderStalled
        exp_alerts:
          - exp_labels: {severity: page, instance: "node7:9400"}  # an empty label is no label
            exp_annotations:
              summary: "node7:9400: the DataLoader has not moved for 13m 20s"
          - exp_labels: {severity: page, instance: "node8:9400", rank: "3"}
            exp_annotations:
              summary: "node8:9400 rank 3: the DataLoader has not moved for 13m 20s"
      - eval_time: 2m
        alertname: DataLoaderHangReported
        exp_alerts:
          - exp_labels: {instance: "node7:9400", mode: hang, kind: worker_stuck}
            exp_annotations:
              summary: "node7:9400: dlwatch reported a hang (worker_stuck); the report is on that node"
"""


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_the_readme_alert_rules_load_and_fire_with_and_without_a_rank(tmp_path):
    (tmp_path / "rules.yaml").write_text(_rules_block())
    (tmp_path / "tests.yaml").write_text(_TESTS)
    check = subprocess.run(["promtool", "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(["promtool", "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
