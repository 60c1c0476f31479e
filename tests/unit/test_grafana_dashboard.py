"""The Grafana dashboard shipped in docs/grafana/: valid JSON that Grafana's dashboard model
reads (panels with unique ids, one row per rank in its table), every series it queries is one
the endpoint serves (the README's table, which test_metrics keeps equal to the endpoint), every
label it groups or selects by is one of that series' labels, and every query parses in
``promtool`` (as a recording rule, the dashboard's variables filled in) where it is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from tests.unit.builders import ROOT
from tests.unit.test_metrics import readme_series

PATH = os.path.join(ROOT, "docs", "grafana", "dlwatch-dashboard.json")


def _exprs(dashboard: dict):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield panel["title"], target["expr"]


def _filled(expr: str) -> str:
    """The query as Prometheus receives it from Grafana: variables replaced (All is ``.*``)."""
    return expr.replace("$__rate_interval", "1m").replace("$node", ".*").replace("$run_id", ".*")


def test_the_dashboard_is_a_grafana_model_with_a_row_per_rank():
    with open(PATH, encoding="utf-8") as f:
        dashboard = json.load(f)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"] and dashboard["title"]
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "node", "run_id"}
    (table,) = [p for p in dashboard["panels"] if p["type"] == "table"]
    columns = set(table["transformations"][1]["options"]["renameByName"].values())
    assert {"s since progress", "batches/s", "data wait (share of time)", "memory (PSS), main + workers"} <= columns
    for _, expr in _exprs(dashboard):
        grouped = re.findall(r"by \(([^)]*)\)", expr)
        assert grouped and all({"node", "rank"} <= {x.strip() for x in g.split(",")} or g == "node" for g in grouped)


def test_every_series_and_label_the_dashboard_uses_is_served():
    with open(PATH, encoding="utf-8") as f:
        dashboard = json.load(f)
    served = readme_series()
    for title, expr in _exprs(dashboard):
        names = re.findall(r"\b(dlwatch_\w+)", expr)
        assert names, title
        for name in names:
            assert name in served, (title, name)
            used = set(re.findall(r"(\w+)=~?\"", expr)) | {
                x.strip() for g in re.findall(r"by \(([^)]*)\)", expr) for x in g.split(",")
            }
            assert used <= served[name], (title, name, used - served[name])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_every_dashboard_query_parses_in_promtool(tmp_path):
    with open(PATH, encoding="utf-8") as f:
        dashboard = json.load(f)
    rules = [{"record": f"dashboard:query_{i}", "expr": _filled(e)} for i, (_, e) in enumerate(_exprs(dashboard))]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = subprocess.run(["promtool", "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_memory_is_never_a_sum_of_rss():
    """RSS counts a page forked workers share with main once per process (805 MB shown for
    ~290 MB used, issue #37): no query adds up RSS (``sum``), and the memory panel and the
    table's memory column sum PSS."""
    with open(PATH, encoding="utf-8") as f:
        dashboard = json.load(f)
    for title, expr in _exprs(dashboard):
        assert not (re.search(r"\bsum\b", expr) and "dlwatch_process_resident_memory_bytes" in expr), (title, expr)
    panel = next(p for p in dashboard["panels"] if p["title"].startswith("Memory of main and workers"))
    (table,) = [p for p in dashboard["panels"] if p["type"] == "table"]
    memory_column = next(t for t in table["targets"] if "memory" in t["expr"])
    for expr in (panel["targets"][0]["expr"], memory_column["expr"]):
        assert expr.startswith("sum by") and "dlwatch_process_proportional_memory_bytes" in expr, expr


def _input_panels(dashboard: dict):
    by_series = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            for name in ("dlwatch_worker_seconds_total", "dlwatch_input_verdict"):
                if name in target["expr"]:
                    by_series[name] = (panel, target["expr"])
    return by_series


def test_the_input_bound_series_have_their_panels():
    """The workers' time by state, stacked as shares of their wall time per rank, and the
    verdict by rank (issue #38, docs/input-bound.md)."""
    with open(PATH, encoding="utf-8") as f:
        panels = _input_panels(json.load(f))
    workers, expr = panels["dlwatch_worker_seconds_total"]
    assert "by (node, rank, local_rank, state)" in expr and "ignoring(state) group_left" in expr
    assert workers["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert workers["fieldConfig"]["defaults"]["unit"] == "percentunit"
    verdict, expr = panels["dlwatch_input_verdict"]
    assert (
        "verdict" in re.findall(r"by \(([^)]*)\)", expr)[0] and "{{verdict}}" in verdict["targets"][0]["legendFormat"]
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_the_workers_state_panel_gives_each_states_share_per_rank_in_promtool(tmp_path):
    """The query evaluated by Prometheus's own engine (``promtool test rules``) on two workers
    of rank 0 whose counters grow 0.75 s/s computing and 0.25 s/s idle (one) and 1 s/s in io
    (the other): cpu 0.375, idle 0.125, io 0.5 of their time."""
    with open(PATH, encoding="utf-8") as f:
        _, expr = _input_panels(json.load(f))["dlwatch_worker_seconds_total"]
    rules = {"groups": [{"name": "g", "rules": [{"record": "share", "expr": _filled(expr)}]}]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    labels = 'node="n1", run_id="r", rank="0", local_rank="0"'
    series = [
        (f'dlwatch_worker_seconds_total{{{labels}, worker_id="0", state="cpu"}}', "0+45x10"),
        (f'dlwatch_worker_seconds_total{{{labels}, worker_id="0", state="idle"}}', "0+15x10"),
        (f'dlwatch_worker_seconds_total{{{labels}, worker_id="1", state="io"}}', "0+60x10"),
    ]
    kept = 'node="n1", rank="0", local_rank="0"'  # run_id is summed away, as the other panels do
    expected = [
        {"labels": f'share{{{kept}, state="{state}"}}', "value": value}
        for state, value in (("cpu", 0.375), ("idle", 0.125), ("io", 0.5))
    ]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [],
                "promql_expr_test": [{"expr": "share", "eval_time": "5m", "exp_samples": expected}],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    check = subprocess.run(["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
