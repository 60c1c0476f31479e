"""The README and the pages of ``docs/``, held to the code: every relative link leads to a file
that exists, every ``dlwatch`` command of a code block parses with dlwatch's own parser, every
``watchdog/…`` path and ``NOTE [ … ]`` they name exists, every page is read by some test, and
the YAML blocks parse; the alert rules among them pass ``promtool check rules`` and behave as
they say under ``promtool test rules`` (a single-process job, whose ``rank`` label is empty,
and one rank of a multi-rank job). Without ``promtool`` (the ``prometheus`` Debian package) the
promtool part is skipped, with a message."""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from tests.unit.builders import ROOT


def pages() -> dict:
    """``{path relative to the root: text}`` of README.md and every ``docs/*.md``."""
    out = {}
    for path in ["README.md", *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            out[os.path.relpath(os.path.join(ROOT, path), ROOT)] = f.read()
    return out


def _yaml_blocks():
    return [b for text in pages().values() for b in re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)]


def _rules_block():
    (block,) = [b for b in _yaml_blocks() if "groups:" in b]
    return block


def test_every_yaml_block_parses():
    blocks = _yaml_blocks()
    assert blocks
    for block in blocks:
        assert yaml.safe_load(block) is not None, block


def test_the_readme_is_a_front_door_of_at_most_300_lines_linking_every_page():
    text = pages()["README.md"]
    assert text.count("\n") <= 300
    for page in pages():
        if page.startswith("docs/"):
            assert f"]({page})" in text, f"README.md does not link {page}"


def test_every_relative_link_leads_to_a_file_that_exists():
    for page, text in pages().items():
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path = target.split("#", 1)[0]
            if path:
                where = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path))
                assert os.path.exists(where), f"{page}: link to {target} leads nowhere"


def test_every_dlwatch_command_of_a_code_block_parses():
    from watchdog.cli import build_parser

    parser = build_parser()
    seen = 0
    for page, text in pages().items():
        for block in re.findall(r"^```(?:sh)?\n(.*?)^```", text, re.S | re.M):
            lines = block.splitlines()
            if any(x.startswith("$ ") for x in lines):  # a session: its commands, not their output
                lines = [x[2:] for x in lines if x.startswith("$ ")]
            for line in lines:
                if not line.startswith("dlwatch ") or line.startswith("dlwatch probe "):
                    continue  # probe commands: tests/unit/test_probe_cli.py parses them
                text = line.split("  #", 1)[0].replace("[options]", "").replace("…", "")
                words = shlex.split(text.replace("[", "").replace("]", ""))  # optional flags: parsed too
                if "--" in words:
                    words = words[: words.index("--") + 2]
                try:
                    parser.parse_args(words[1:])
                except SystemExit as e:
                    raise AssertionError(f"{page}: {line!r} does not parse") from e
                seen += 1
    assert seen >= 10


def test_every_module_path_and_note_the_pages_name_exists():
    code = ""
    for path in glob.glob(os.path.join(ROOT, "watchdog", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            code += f.read()
    for page, text in pages().items():
        for path in re.findall(r"`((?:watchdog|probes|tests|docs)/[\w/.-]+)`", text):
            assert os.path.exists(os.path.join(ROOT, path)), f"{page} names {path}, which does not exist"
        for note in re.findall(r"NOTE \[ ([^\]]+?) \]", text):
            assert f"NOTE [ {note} ]" in code, f"{page} names NOTE [ {note} ], which the code does not hold"


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
def test_the_alert_rules_of_the_docs_load_and_fire_with_and_without_a_rank(tmp_path):
    (tmp_path / "rules.yaml").write_text(_rules_block())
    (tmp_path / "tests.yaml").write_text(_TESTS)
    check = subprocess.run(["promtool", "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(["promtool", "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_security_page_states_the_limits_the_code_has():
    """Each limit docs/security.md states beside its constant's name is the code's."""
    from watchdog.collect import inside
    from watchdog.commands import cluster, verify, verify_plan
    from watchdog.report import browse, writer
    from watchdog.watch import metrics

    text = " ".join(pages()["docs/security.md"].split())
    stated = {
        "2 MiB (`RECORD_MAX_BYTES`)": inside.RECORD_MAX_BYTES == 2 << 20,
        "256 counter files are held open (`HELD_MAX`)": inside.HELD_MAX == 256,
        "64 MiB (`MAX_REPORT_BYTES`)": browse.MAX_REPORT_BYTES == 64 << 20,
        "64 levels (`MAX_JSON_DEPTH`)": browse.MAX_JSON_DEPTH == 64,
        "10 minutes (`STALE_TEMP_S`)": writer.STALE_TEMP_S == 600,
        "default 30, `DEADLINE_S`": cluster.DEADLINE_S == 30,
        "8 MiB (`MAX_ANSWER_BYTES`)": cluster.MAX_ANSWER_BYTES == 8 << 20,
        "20,000 series per query (`MAX_SERIES`)": cluster.MAX_SERIES == 20_000,
        "within 5 s of connecting (`REQUEST_DEADLINE_S`)": metrics.REQUEST_DEADLINE_S == 5,
        "within 10 s (`RESPONSE_DEADLINE_S`)": metrics.RESPONSE_DEADLINE_S == 10,
        "At most 64 connections are held (`MAX_CONNECTIONS`)": metrics.MAX_CONNECTIONS == 64,
        "integers 1 to 1024 (`MAX_THREADS`)": verify_plan.MAX_THREADS == 1024,
        "`python -I -m watchdog run …`": verify.run_argv("s", "r", [], ["x"])[1:5] == ["-I", "-m", "watchdog", "run"],
    }
    for phrase, holds in stated.items():
        assert phrase in text, f"docs/security.md no longer says {phrase!r}"
        assert holds, f"docs/security.md says {phrase!r}, which the code no longer holds"
    for name in ("OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "CUDA_LAUNCH_BLOCKING"):
        assert name in verify.REPORT_ENV_NAMES and f"`{name}`" in text
    assert "LD_PRELOAD" not in verify.REPORT_ENV_NAMES and "PYTHONPATH" not in verify.REPORT_ENV_NAMES
