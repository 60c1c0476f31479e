"""Settings: defaults, the YAML file, validation errors that name the key."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.unit.builders import ROOT
from watchdog import config
from watchdog.errors import ConfigError


def test_config_yaml_holds_every_default_with_a_comment():
    with open(os.path.join(ROOT, "config.yaml"), encoding="utf-8") as f:
        text = f.read()
    assert yaml.safe_load(text) == config.defaults_as_dict()
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and not line.rstrip().endswith(":"):
            assert "#" in line, f"setting without a comment: {line}"


@pytest.mark.parametrize(
    "data, key",
    [
        ({"x": 1}, "x"),
        ({"py_spy": {"nativ": True}}, "py_spy.nativ"),
        ({"stall_timeout_s": 0}, "stall_timeout_s"),
        ({"interval_s": True}, "interval_s"),
    ],
)
def test_config_errors_name_the_key(data, key):  # noqa: D103
    with pytest.raises(ConfigError) as e:
        config.validate(data, "f.yaml")
    assert e.value.key == key and "f.yaml" in str(e.value)


def test_yaml_reads_exponent_floats_and_keeps_ints(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("stall_timeout_s: 1e3\ntimeline_samples: 600\n")
    c = config.load(str(cfg), {})
    assert c.stall_timeout_s == 1000.0 and c.timeline_samples == 600


def test_non_utf8_config_is_a_config_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"\xff\xfe\x00garbage\x80")
    with pytest.raises(ConfigError) as e:
        config.load(str(cfg), {})
    assert "UTF-8" in str(e.value)
