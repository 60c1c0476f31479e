"""Settings grouped and renamed (issue #36, section 5): ``alerts:`` and ``metrics:`` groups as
``py_spy:`` is, ``memory_read_base_interval_s`` (was ``full_info_interval_s``), the old flat keys
still read with one line on stderr, config.yaml's comments one line each; the report hides the
grouped alert commands as it hid the flat ones."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.builders import ROOT
from watchdog import config, redact
from watchdog.errors import ConfigError
from watchdog.watch.publish import settings_shown

OLD_FILE = (
    "interval_s: 2\n"
    "full_info_interval_s: 3\n"
    "on_hang_exec: 'echo hang'\n"
    "exec_timeout_s: 12\n"
    "metrics_port: 9400\n"
    "metrics_addr: 0.0.0.0\n"
)


def _write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_alerts_and_metrics_are_groups_as_py_spy_is():
    keys = config.all_keys()
    assert {"alerts.on_hang_exec", "alerts.on_crash_exec", "alerts.on_warning_exec", "alerts.exec_timeout_s"} <= set(
        keys
    )
    assert {"metrics.port", "metrics.addr", "memory_read_base_interval_s"} <= set(keys)
    assert not {"on_hang_exec", "exec_timeout_s", "metrics_port", "metrics_addr", "full_info_interval_s"} & set(keys)
    c = config.validate({"alerts": {"exec_timeout_s": 5}, "metrics": {"port": 9400}}, "f.yaml")
    assert (c.alerts.exec_timeout_s, c.metrics.port, c.metrics.addr) == (5.0, 9400, "127.0.0.1")


def test_old_flat_keys_are_read_under_their_new_names_with_one_line_on_stderr(tmp_path, capfd):
    path = _write(tmp_path, OLD_FILE)
    c = config.load(path, {})
    assert c.interval_s == 2.0 and c.memory_read_base_interval_s == 3.0
    assert c.alerts.on_hang_exec == "echo hang" and c.alerts.exec_timeout_s == 12.0
    assert (c.metrics.port, c.metrics.addr) == (9400, "0.0.0.0")
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dlwatch: {path}: deprecated settings"), err
    for old, new in [
        ("full_info_interval_s", "memory_read_base_interval_s"),
        ("on_hang_exec", "alerts.on_hang_exec"),
        ("exec_timeout_s", "alerts.exec_timeout_s"),
        ("metrics_port", "metrics.port"),
        ("metrics_addr", "metrics.addr"),
    ]:
        assert f"{old} -> {new}" in err, err
    assert "(line 2)" in err
    assert config.load(_write(tmp_path, "interval_s: 2\n", "new.yaml"), {}).interval_s == 2.0
    assert capfd.readouterr().err == ""  # a file of new keys: nothing said


def test_a_flag_overrides_an_old_key_of_the_file(tmp_path, capfd):
    c = config.load(_write(tmp_path, OLD_FILE), {"metrics.port": 9500}, {"metrics.port": "--metrics-port"})
    assert c.metrics.port == 9500 and c.metrics.addr == "0.0.0.0"
    assert capfd.readouterr().err.count("\n") == 1


def test_a_bad_value_under_an_old_key_names_that_key_and_its_line(tmp_path, capfd):
    path = _write(tmp_path, "interval_s: 2\nmetrics_port: 70000\n")
    with pytest.raises(ConfigError) as e:
        config.load(path, {})
    assert e.value.key == "metrics_port" and str(e.value).startswith(f"{path}:2: metrics_port: "), str(e.value)
    assert capfd.readouterr().err == ""  # the error alone, no deprecation line before it
    with pytest.raises(ConfigError) as e:
        config.load(_write(tmp_path, "full_info_interval_s: .inf\n", "inf.yaml"), {})
    assert e.value.key == "full_info_interval_s" and "finite" in str(e.value)


@pytest.mark.parametrize(
    "body, key, line",
    [
        ("metrics:\n  port: 9400\nmetrics_port: 9401\n", "metrics_port", 3),
        ("full_info_interval_s: 3\nmemory_read_base_interval_s: 4\n", "full_info_interval_s", 1),
        ("alerts: 3\non_hang_exec: x\n", "on_hang_exec", 2),
    ],
)
def test_an_old_key_with_its_new_one_or_beside_a_bad_group_is_refused_naming_it(tmp_path, body, key, line):
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError) as e:
        config.load(path, {})
    assert e.value.key == key and str(e.value).startswith(f"{path}:{line}: {key}: "), str(e.value)


def test_the_cli_says_the_deprecation_once_and_runs(tmp_path):
    path = _write(tmp_path, "full_info_interval_s: 3\nexec_timeout_s: 5\n")
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "run", "--no-hook", "--config", path, "--report-dir", str(tmp_path / "r")]
        + ["--", "true"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if "deprecated" in x]
    assert len(lines) == 1 and "full_info_interval_s -> memory_read_base_interval_s" in lines[0], done.stderr
    assert "exec_timeout_s -> alerts.exec_timeout_s" in lines[0]


def test_config_yaml_says_each_setting_in_one_line_of_at_most_120_columns():
    with open(os.path.join(ROOT, "config.yaml"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert all(len(x) <= 120 for x in lines), [x for x in lines if len(x) > 120]
    for key in config.all_keys():
        assert "\n" not in config.describe(key) and len(config.describe(key)) <= 90, key


def test_a_report_hides_the_grouped_alert_commands():
    cfg = config.validate({"alerts": {"on_hang_exec": "curl -H 'token: s3cret' x", "on_crash_exec": "y"}}, "f")
    shown = settings_shown(cfg)
    assert shown["alerts"]["on_hang_exec"] == redact.REDACTED and shown["alerts"]["on_crash_exec"] == redact.REDACTED
    assert shown["alerts"]["on_warning_exec"] is None and "s3cret" not in repr(shown)
    assert shown["metrics"] == {"port": None, "addr": "127.0.0.1"}
