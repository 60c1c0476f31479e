"""The Prometheus files shipped in docs/prometheus/: alerts.yaml passes ``promtool check
rules`` and each alert fires (and only then) under ``promtool test rules alerts_test.yaml``
(shipped beside it) on input series shaped like the sidecar's (labels as the endpoint serves
them); scrape.yaml passes ``promtool check config``, and scrape-kubernetes.yaml too where this
promtool has Kubernetes discovery. Without ``promtool`` (the ``prometheus`` Debian package)
they are skipped, with a message."""

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


def test_the_shipped_files_are_yaml():
    for name in ("alerts.yaml", "alerts_test.yaml", "scrape.yaml", "scrape-kubernetes.yaml"):
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            assert yaml.safe_load(f), name


@needs_promtool
def test_the_alert_rules_load_and_each_fires_on_its_own_condition():
    check = subprocess.run(
        ["promtool", "check", "rules", os.path.join(DOCS, "alerts.yaml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(["promtool", "test", "rules", "alerts_test.yaml"], cwd=DOCS, capture_output=True, text=True)
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
