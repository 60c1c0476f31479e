"""The Prometheus files shipped in docs/prometheus/: alerts.yaml passes ``promtool check
rules`` and each alert fires (and only then) under ``promtool test rules`` on input series
shaped like the sidecar's (labels as the endpoint serves them); scrape.yaml passes ``promtool
check config``, and scrape-kubernetes.yaml too where this promtool has Kubernetes discovery.
Without ``promtool`` (the ``prometheus`` Debian package) they are skipped, with a message."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from tests.unit.builders import ROOT

DOCS = os.path.join(ROOT, "docs", "prometheus")
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)"
)

R0 = 'node="node-a", run_id="job42", rank="0", local_rank="0", group_rank="0"'
R5 = 'node="node-b", run_id="job42", rank="5", local_rank="1", group_rank="2"'
SOLO = 'node="node-c", run_id="", rank="", local_rank="", group_rank=""'

_TESTS = f"""
rule_files: [{os.path.join(DOCS, "alerts.yaml")}]
evaluation_interval: 30s
tests:
  - interval: 30s
    input_series:
      - series: 'dlwatch_seconds_since_progress{{{R5}}}'
        values: '0+30x40'
      - series: 'dlwatch_seconds_since_progress{{{R0}}}'
        values: '0x40'
      - series: 'dlwatch_reports_total{{node="node-b", rank="5", mode="hang", kind="worker_stuck"}}'
        values: '0 0 0 1 1 1 1 1 1 1'
      - series: 'up{{job="dlwatch", instance="node-d:9400"}}'
        values: '1 1 0 0 0 0 0 0 0 0'
      - series: 'up{{job="dlwatch", instance="node-a:9400"}}'
        values: '1x10'
      - series: 'dlwatch_process_open_fds{{{SOLO}, role="main", worker_id=""}}'
        values: '1000x10'
      - series: 'dlwatch_process_max_fds{{{SOLO}, role="main", worker_id=""}}'
        values: '1024x10'
      - series: 'dlwatch_shm_used_bytes{{node="node-c"}}'
        values: '60000000x10'
      - series: 'dlwatch_shm_size_bytes{{node="node-c"}}'
        values: '64000000x10'
      - series: 'dlwatch_process_resident_memory_bytes{{{R0}, role="dataloader_worker", worker_id="0"}}'
        values: '1000000000+60000000x60'
      - series: 'dlwatch_process_resident_memory_bytes{{{R5}, role="dataloader_worker", worker_id="0"}}'
        values: '1000000000x60'
    alert_rule_test:
      - eval_time: 10m
        alertname: DataLoaderStalled
        exp_alerts:
          - exp_labels: {{severity: page, node: node-b, run_id: job42, rank: "5", local_rank: "1", group_rank: "2"}}
            exp_annotations:
              summary: "node-b rank 5: the DataLoader has not moved for 10m 0s"
      - eval_time: 2m
        alertname: DataLoaderHangReported
        exp_alerts:
          - exp_labels: {{severity: page, node: node-b, rank: "5", mode: hang, kind: worker_stuck}}
            exp_annotations:
              summary: "node-b rank 5: dlwatch reported a hang (worker_stuck); the report is on that node"
      - eval_time: 4m
        alertname: DlwatchSidecarDown
        exp_alerts:
          - exp_labels: {{severity: ticket, job: dlwatch, instance: "node-d:9400"}}
            exp_annotations:
              summary: "node-d:9400: the dlwatch sidecar does not answer"
      - eval_time: 2m
        alertname: FileDescriptorsNearLimit
        exp_alerts:
          - exp_labels: {{severity: ticket, node: node-c, role: main}}
            exp_annotations:
              summary: "node-c main: 97.66% of RLIMIT_NOFILE in use"
      - eval_time: 2m
        alertname: DevShmNearlyFull
        exp_alerts:
          - exp_labels: {{severity: ticket, node: node-c}}
            exp_annotations:
              summary: "node-c: /dev/shm is 93.75% full"
      - eval_time: 25m
        alertname: WorkerMemoryClimbing
        exp_alerts:
          - exp_labels: {{severity: ticket, node: node-a, run_id: job42, rank: "0"}}
            exp_annotations:
              summary: "node-a rank 0: DataLoader workers' memory grows by 1.907MiB/s"
"""


def test_the_shipped_files_are_yaml():
    for name in ("alerts.yaml", "scrape.yaml", "scrape-kubernetes.yaml"):
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            assert yaml.safe_load(f), name


@needs_promtool
def test_the_alert_rules_load_and_each_fires_on_its_own_condition(tmp_path):
    check = subprocess.run(
        ["promtool", "check", "rules", os.path.join(DOCS, "alerts.yaml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    (tmp_path / "tests.yaml").write_text(_TESTS)
    run = subprocess.run(["promtool", "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_the_scrape_configs_are_valid_prometheus_configs():
    check = subprocess.run(["promtool", "check", "config", "scrape.yaml"], cwd=DOCS, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    k8s = subprocess.run(
        ["promtool", "check", "config", "scrape-kubernetes.yaml"], cwd=DOCS, capture_output=True, text=True
    )
    if "kubernetes_sd_configs not found" in k8s.stdout + k8s.stderr:
        pytest.skip(
            "this promtool has no Kubernetes discovery (Debian's build): scrape-kubernetes.yaml is YAML-checked only"
        )
    assert k8s.returncode == 0, k8s.stdout + k8s.stderr
