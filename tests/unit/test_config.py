"""Settings: defaults, the YAML file, validation errors that name the file, line and key;
one description of every setting, followed by config.yaml, the table of docs/configuration.md and ``--help``."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time

import msgspec
import pytest
import yaml

from tests.unit.builders import ROOT
from watchdog import cli, config
from watchdog.commands import parser as parser_mod
from watchdog.errors import ConfigError

# Flags that set a setting to false (the others are in watchdog.commands.parser.OVERRIDES).
NEGATIONS = {"--no-native": "py_spy.native", "--no-hook": "hook"}
FLOAT_KEYS = [k for k in config.all_keys() if config._field_type(k).__origin__ is float]


def _default(dotted):
    value = config.defaults_as_dict()
    for part in dotted.split("."):
        value = value[part]
    return value


def _write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return str(path)


def _dlwatch(*args, timeout=30):
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "run", *args, "--", "true"],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


# --- one description of every setting ------------------------------------------------------


def test_every_setting_has_a_description():
    assert len(config.all_keys()) >= 25 and "py_spy.timeout_s" in config.all_keys()
    for key in config.all_keys():
        assert len(config.describe(key)) > 10, key
    with pytest.raises(KeyError):
        config.describe("py_spy.nope")


def test_config_yaml_holds_every_key_its_default_and_its_description():
    with open(os.path.join(ROOT, "config.yaml"), encoding="utf-8") as f:
        text = f.read()
    assert yaml.safe_load(text) == config.defaults_as_dict()
    seen, parent = [], ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^( *)([a-z_0-9]+):(.*?)(?:\s+# (.*))?$", line)
        assert m, f"unexpected line: {line}"
        indent, key, _, comment = m.groups()
        dotted = f"{parent}.{key}" if indent else key
        if not indent:
            parent = key
        assert comment == config.describe(dotted), (
            f"config.yaml {dotted}: comment is not the field's description:\n{comment}\n{config.describe(dotted)}"
        )
        seen.append(dotted)
    assert set(config.all_keys()) <= set(seen)


def _readme_table():
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("| option | setting | default | meaning |")
    rows = {}
    for line in text[start:].split("\n\n", 1)[0].splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        option, setting, default, meaning = (c.replace("\\|", "|") for c in cells)
        if setting:
            rows[setting.strip("`")] = (option.strip("`").split(" ")[0], default.strip("`"), meaning.replace("`", ""))
    return rows


def test_readme_table_lists_every_setting_with_its_default_flag_and_description():
    rows = _readme_table()
    assert set(rows) == set(config.all_keys())
    flag_of = {key: flag for flag, (key, _) in parser_mod.OVERRIDES.items()}
    flag_of.update({key: flag for flag, key in NEGATIONS.items()})
    for key, (option, default, meaning) in rows.items():
        assert yaml.safe_load(default) == _default(key), f"docs/configuration.md default of {key}: {default}"
        assert meaning == config.describe(key).replace("`", ""), (
            f"docs/configuration.md meaning of {key}:\n{meaning}\n{config.describe(key)}"
        )
        assert option == flag_of.get(key, ""), f"docs/configuration.md option of {key}: {option!r}"


def test_each_flag_help_names_its_key_and_gives_its_description():
    parser = cli.build_parser()
    run = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    flags = {opt: action for action in run._actions for opt in action.option_strings}
    expected = {flag: key for flag, (key, _) in parser_mod.OVERRIDES.items()} | NEGATIONS
    for flag, key in expected.items():
        text = flags[flag].help % {}  # argparse %-formats help: a stray % would fail here
        assert key in text and config.describe(key) in text, (flag, text)
    assert "--interval" in run.format_help()


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, key",
    [
        ({"x": 1}, "x"),
        ({"py_spy": {"nativ": True}}, "py_spy.nativ"),
        ({"stall_timeout_s": 0}, "stall_timeout_s"),
        ({"interval_s": True}, "interval_s"),
        ({"interval_s": "1"}, "interval_s"),
        ({"timeline_samples": 600.0}, "timeline_samples"),
        ({"hook": 1}, "hook"),
        ({"on_hang": "kill"}, "on_hang"),
        ({"report_dir": ""}, "report_dir"),
        ({"report_dir": "a\x00b"}, "report_dir"),
        ({"metrics_port": 65536}, "metrics_port"),  # an old key: named as written
        ({"metrics": {"port": 65536}}, "metrics.port"),
        ({"metrics": {"prot": 1}}, "metrics.prot"),
        ({"alerts": {"exec_timeout_s": 0}}, "alerts.exec_timeout_s"),
        ({"alerts": "x"}, "alerts"),
        ({"py_spy": 3}, "py_spy"),
        ({"py_spy": {"timeout_s": 121}}, "py_spy.timeout_s"),
        ({1: 2}, "1"),
    ],
)
def test_config_errors_name_the_key(data, key):
    with pytest.raises(ConfigError) as e:
        config.validate(data, "f.yaml")
    assert e.value.key == key and str(e.value).startswith(f"f.yaml: {key}: "), str(e.value)


def test_valid_settings_make_a_frozen_config_with_attribute_access():
    c = config.validate({"interval_s": 2, "on_hang": "terminate", "py_spy": {"timeout_s": 7}}, "f.yaml")
    assert c.interval_s == 2.0 and isinstance(c.interval_s, float)
    assert c.on_hang == "terminate" and c.py_spy.timeout_s == 7.0 and c.py_spy.native is True
    with pytest.raises((AttributeError, TypeError)):
        c.interval_s = 3.0
    assert c.as_dict()["py_spy"]["timeout_s"] == 7.0
    assert config.Config() == config.validate({}, "f.yaml")


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", "1e999"])
def test_every_float_setting_refuses_non_finite_numbers(tmp_path, key, text):
    *parents, leaf = key.split(".")
    body = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parents)) + f"{'  ' * len(parents)}{leaf}: {text}\n"
    with pytest.raises(ConfigError) as e:
        config.load(_write(tmp_path, body), {})
    assert e.value.key == key and "finite" in str(e.value)
    assert f"c.yaml:{len(parents) + 1}: " in str(e.value)


def test_command_line_non_finite_is_blamed_on_the_flag():
    with pytest.raises(ConfigError) as e:
        config.load(None, {"py_spy.timeout_s": float("inf")}, {"py_spy.timeout_s": "--pyspy-timeout"})
    assert str(e.value).startswith("command line: --pyspy-timeout: ") and "finite" in str(e.value)


def test_yaml_reads_exponent_floats_and_keeps_ints(tmp_path):
    c = config.load(_write(tmp_path, "stall_timeout_s: 1e3\ntimeline_samples: 600\n"), {})
    assert c.stall_timeout_s == 1000.0 and c.timeline_samples == 600


def test_empty_file_gives_the_defaults(tmp_path):
    assert config.load(_write(tmp_path, "# nothing\n"), {}) == config.Config()


def test_error_names_the_line_of_the_key(tmp_path):
    path = _write(tmp_path, "interval_s: 2\npy_spy:\n  native: true\n  timeout_s: -1\n")
    with pytest.raises(ConfigError) as e:
        config.load(path, {})
    assert e.value.key == "py_spy.timeout_s" and str(e.value).startswith(f"{path}:4: py_spy.timeout_s: ")
    assert "(got -1)" in str(e.value)


def test_bad_value_in_the_file_is_blamed_on_the_file_not_the_flag(tmp_path):
    path = _write(tmp_path, "report_dir: r\ninterval_s: -3\n")
    with pytest.raises(ConfigError) as e:
        config.load(path, {"interval_s": 1.0}, {"interval_s": "--interval"})
    assert str(e.value).startswith(f"{path}:2: interval_s: ") and "(got -3)" in str(e.value)
    with pytest.raises(ConfigError) as e:  # and a bad flag over a good file is the flag's
        config.load(_write(tmp_path, "interval_s: 2\n", "ok.yaml"), {"interval_s": -3.0}, {"interval_s": "--interval"})
    assert str(e.value).startswith("command line: --interval: ") and "(got -3.0)" in str(e.value)


def test_flags_override_the_file(tmp_path):
    c = config.load(
        _write(tmp_path, "interval_s: 2\npy_spy:\n  timeout_s: 3\n"), {"interval_s": 4.0, "py_spy.native": False}
    )
    assert (c.interval_s, c.py_spy.timeout_s, c.py_spy.native) == (4.0, 3.0, False)


# --- hostile files (issue #10) -------------------------------------------------------------


def _load_error(path) -> str:
    with pytest.raises(ConfigError) as e:
        config.load(path, {})
    text = str(e.value)
    assert "\n" not in text and len(text) < len(path) + 300, text
    return text


def test_non_utf8_config_is_a_config_error(tmp_path):
    path = _write(tmp_path, b"interval_s: 1\n\xff\xfe\x00garbage\x80")
    assert _load_error(path).startswith(f"{path}:2: ") and "UTF-8" in _load_error(path)


def test_huge_integer_is_refused_with_its_line(tmp_path):
    path = _write(tmp_path, "hook: true\ninterval_s: " + "9" * 5000 + "\n")
    text = _load_error(path)
    assert text.startswith(f"{path}:2: ") and "99999" in text


def test_big_integer_under_pythons_limit_is_out_of_range(tmp_path):
    text = _load_error(_write(tmp_path, "timeline_samples: " + "9" * 4000 + "\n"))
    assert "timeline_samples" in text and "out of range" in text


def test_unhashable_key_is_refused_with_its_line(tmp_path):
    path = _write(tmp_path, "hook: true\n? [a, b]\n: 1\n")
    text = _load_error(path)
    assert text.startswith(f"{path}:2: ") and "key" in text


def test_deep_nesting_is_refused(tmp_path):
    path = _write(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested" in _load_error(path)


def test_alias_bomb_is_refused_quickly_and_briefly(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefg", "bcdefgh"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("interval_s: [" + ",".join(["*h"] * 9) + "]")
    path = _write(tmp_path, "\n".join(lines) + "\n")
    t0 = time.monotonic()
    text = _load_error(path)
    assert time.monotonic() - t0 < 1.0
    assert text.startswith(f"{path}:1: ") and "anchor" in text


def test_alias_is_refused_with_its_line(tmp_path):
    path = _write(tmp_path, "hook: true\nreport_dir: *x\n")
    text = _load_error(path)
    assert text.startswith(f"{path}:2: ") and "alias" in text


def test_long_value_is_echoed_only_in_part(tmp_path):
    text = _load_error(_write(tmp_path, "on_hang: " + "k" * 100_000 + "\n"))
    assert "on_hang" in text and "kkkk" in text and "report, terminate" in text


def test_long_unknown_key_is_named_only_in_part(tmp_path):
    assert "unknown setting" in _load_error(_write(tmp_path, "? " + "x" * 100_000 + "\n: 1\n"))


def test_file_over_the_size_limit_is_refused_unread(tmp_path):
    path = _write(tmp_path, "# " + "x" * config.MAX_FILE_BYTES + "\n")
    assert "larger than" in _load_error(path)


def test_special_files_are_refused_without_blocking(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    errors = []

    def load_fifo():  # an open() for reading would wait for a writer forever
        try:
            config.load(fifo, {})
        except ConfigError as e:
            errors.append(str(e))

    t0 = time.monotonic()
    reader = threading.Thread(target=load_fifo, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # let the blocked open() return, so that no thread is left behind
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not reader.is_alive() and "FIFO" in errors[0], errors
    assert "directory" in _load_error(str(tmp_path))
    assert "character device" in _load_error("/dev/null")
    assert time.monotonic() - t0 < 1.0
    assert "No such file" in _load_error(str(tmp_path / "missing.yaml"))


def test_yaml_tags_and_syntax_errors_are_one_line(tmp_path):
    text = _load_error(_write(tmp_path, "hook: !!python/object:os.system x\n"))
    assert ":1: " in text and "YAML" in text
    text = _load_error(_write(tmp_path, "hook: true\n  bad: [\n", "s.yaml"))
    assert "s.yaml:" in text and "not valid YAML" in text
    text = _load_error(_write(tmp_path, "hook: true\nreport_dir: a\x01b\n", "ctl.yaml"))
    assert "ctl.yaml:2: " in text


def test_top_level_must_be_a_mapping(tmp_path):
    assert "expected a mapping" in _load_error(_write(tmp_path, "- 1\n- 2\n"))


def test_excerpt_is_short_for_any_value():
    assert len(config.excerpt("x" * 10_000)) <= config.EXCERPT_CHARS
    assert len(config.excerpt([[[list(range(1000))] * 100] * 100])) <= config.EXCERPT_CHARS
    assert "bits" in config.excerpt(10**5000)


# --- through the command line: exit code 2, one line ---------------------------------------


@pytest.mark.parametrize(
    "content, needle",
    [
        ("interval_s: " + "9" * 5000 + "\n", ":1: "),
        ("? [a, b]\n: 1\n", ":1: "),
        ("a: " + "[" * 5000 + "\n", "nested"),
        ('a: &a ["lol"]\nb: [*a, *a]\n', "anchor"),
        ("stall_timeout_s: 1e999\n", "stall_timeout_s"),
        ("on_hang: " + "k" * 100_000 + "\n", "on_hang"),
    ],
    ids=["huge-int", "unhashable-key", "deep", "alias", "inf", "long-value"],
)
def test_cli_loader_errors_exit_2_in_one_short_line(tmp_path, content, needle):
    path = _write(tmp_path, content)
    done = _dlwatch("--no-hook", "--config", path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and len(done.stderr) < 400, done.stderr
    assert path in done.stderr and needle in done.stderr and "Traceback" not in done.stderr


def test_cli_fifo_config_exits_2_at_once(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    done = _dlwatch("--config", fifo, timeout=20)  # blocked forever before the fix
    assert done.returncode == 2 and "FIFO" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_cli_bad_value_in_file_is_not_blamed_on_the_flag(tmp_path):
    path = _write(tmp_path, "interval_s: -3\n")
    done = _dlwatch("--config", path, "--interval", "1")
    assert done.returncode == 2, done.stderr
    assert f"{path}:1: interval_s: " in done.stderr and "--interval" not in done.stderr, done.stderr


def test_msgspec_rejects_what_the_settings_need_rejected():
    # The strictness the loader relies on (https://jcristharif.com/msgspec/usage.html#strict-vs-lax-mode).
    for bad in ({"hook": "yes"}, {"timeline_samples": 1.5}, {"interval_s": "1.0"}):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, config.Config, strict=True)


def test_a_huge_bad_flag_value_gives_one_short_line(capsys):
    import pytest

    from watchdog import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--metrics-port", "9" * 5000, "--", "true"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 300 and "--metrics-port" in err


def test_a_report_dir_that_is_a_file_or_lies_under_one_is_refused_with_its_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for value, message in ((blocker, "report_dir: not a folder"), (blocker / "sub", "is not a folder")):
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(f"interval_s: 1.0\nreport_dir: {value}\n")
        with pytest.raises(ConfigError) as e:
            config.load(str(cfg), {})
        assert message in str(e.value) and ":2:" in str(e.value), str(e.value)
    cfg.write_text(f"report_dir: {tmp_path / 'new' / 'reports'}\n")  # may still be made
    assert config.load(str(cfg), {}).report_dir.endswith("reports")


def test_a_flags_help_gives_the_range_its_setting_accepts():
    assert config.bounds("interval_s") == ">= 0.1, <= 60"
    assert config.bounds("report_dir") == ""
    assert "(interval_s; >= 0.1, <= 60)" in config.flag_help("interval_s")
    assert cli.build_parser().format_help()  # builds with every range in the flags' help


@pytest.mark.parametrize("body, line", [("~: 1\n", 1), ("interval_s: 1\n1: 2\n", 2), ("py_spy:\n  true: x\n", 2)])
def test_a_key_that_is_not_a_name_is_refused_with_its_line(tmp_path, body, line):
    with pytest.raises(config.ConfigError) as e:
        config.load(_write(tmp_path, body), {})
    assert f":{line}:" in str(e.value) and "a key must be a name" in str(e.value), str(e.value)
