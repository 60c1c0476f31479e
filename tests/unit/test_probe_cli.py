"""The ``dlwatch probe`` command table and parsers, ``auto`` workers, the benchmarks' ceiling
model and the probes' child environment: no process is started and nothing is measured."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from probes import cli as probes_cli
from probes.bench import commands, output
from probes.bench.grid import LoaderConfig
from probes.bench.measure import Result, Run
from probes.env import PACKAGE_ROOT, child_env
from watchdog.cli import build_parser as dlwatch_parser

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def _readme_probe_lines():
    """Each ``dlwatch probe …`` command of README.md's code blocks, as words (comment dropped)."""
    with open(README, encoding="utf-8") as f:
        lines = [m.group(1) for m in re.finditer(r"^(dlwatch probe [^\n]*)$", f.read(), re.M)]
    return [shlex.split(line.split("#", 1)[0]) for line in lines]


def _installed(name):
    try:
        probes_cli._entry(name)
    except ImportError:
        return False
    return True


# --- the command table -------------------------------------------------------------------


def test_probe_help_lists_every_command_with_its_help(capsys):
    with pytest.raises(SystemExit) as e:
        dlwatch_parser().parse_args(["probe", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "usage: dlwatch probe" in out
    for name, (_, help_text) in probes_cli.COMMANDS.items():
        assert f"{name} {' '.join(help_text.split())}" in out, name
    assert "overhead" in probes_cli.COMMANDS


@pytest.mark.parametrize("argv", [["nope"], []], ids=["unknown", "missing"])
def test_unknown_or_missing_command_is_one_line_exit_2(argv, capsys):
    for parse in (lambda: dlwatch_parser().parse_args(["probe", *argv]), lambda: probes_cli.main(argv)):
        with pytest.raises(SystemExit) as e:
            parse()
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "dlwatch probe --help" in err, err
        if argv:
            assert "'nope'" in err


def test_a_commands_arguments_reach_it_untouched_help_included():
    args = dlwatch_parser().parse_args(["probe", "bench", "--num-workers", "0", "--help", "--", "x"])
    assert args.command == "probe" and args.probe_args == ["bench", "--num-workers", "0", "--help", "--", "x"]
    assert probes_cli.build_parser().parse_args(["autotune", "--cpu-ms", "5"]).probe_args == [
        "autotune",
        "--cpu-ms",
        "5",
    ]


def test_a_missing_command_module_is_one_line_exit_2_and_spares_the_others(monkeypatch, capsys):
    monkeypatch.setitem(
        probes_cli.COMMANDS, "ghost", ("probes.no_such_module_xyz", "a command whose module is not installed")
    )
    assert probes_cli.run(["ghost"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'ghost'" in err and "probes.no_such_module_xyz" in err, err
    with pytest.raises(SystemExit) as e:  # the others still work
        probes_cli.run(["repro", "--help"])
    assert e.value.code == 0


def test_a_missing_dependency_is_named(monkeypatch, capsys):
    def entry(name):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(probes_cli, "_entry", entry)
    assert probes_cli.run(["bench"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "[probes] extra" in err and "torch" in err, err


@pytest.mark.parametrize("name", list(probes_cli.COMMANDS))
def test_every_commands_help_shows_each_default_once(name, capsys):
    if not _installed(name):
        pytest.skip(f"{probes_cli.COMMANDS[name][0]} is not in this tree")
    with pytest.raises(SystemExit) as e:
        probes_cli.run([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: dlwatch probe {name}" in out
    assert "(default: None)" not in out
    # One entry per argument: from a line that starts with two spaces and a name to the next.
    entries = [e for e in re.split(r"\n(?=  \S)", out) if e.startswith("  ")]
    assert entries
    for entry in entries:
        assert entry.lower().count("default") <= 1, entry


def test_help_formatter_adds_a_default_only_where_it_says_something():
    p = probes_cli.Parser(prog="x")
    p.add_argument("--a", default=3, help="three")
    p.add_argument("--b", default=None, help="nothing")
    p.add_argument("--c", default=0.0, help="zero")
    p.add_argument("--d", default=5, help="five (default: five)")
    p.add_argument("--e", action="store_true", help="a flag")
    text = " ".join(p.format_help().split())
    assert "three (default: 3)" in text and "zero (default: 0.0)" in text
    assert "nothing --c" in text and "five (default: five) --e" in text and text.endswith("a flag")


# --- autotune's `auto` (issue #10, 1) ---------------------------------------------------


def test_auto_workers():
    assert commands.auto_workers(2) == [0, 1, 2, 4]
    assert commands.auto_workers(6) == [0, 1, 2, 4, 6, 8]
    assert commands.auto_workers(0.5) == [0, 1, 2]
    assert commands.resolve_workers("auto", usable=2) == "0,1,2,4"
    assert commands.resolve_workers("auto, 16", usable=2) == "0,1,2,4,16"
    assert commands.resolve_workers("0,3") == "0,3"


def test_every_readme_probe_command_parses_and_its_grid_expands():
    lines = _readme_probe_lines()
    assert any(words[2] == "autotune" for words in lines)
    for words in lines:
        assert words[:2] == ["dlwatch", "probe"]
        args = dlwatch_parser().parse_args(words[1:])
        name = args.probe_args[0]
        assert name in probes_cli.COMMANDS
        if name in ("bench", "autotune", "seed-check"):
            own = commands.build_parser(name).parse_args(args.probe_args[1:])
            commands._check_numbers(own)
            if name != "seed-check":
                grid = commands._grid(own)  # raised "--num-workers: bad value 'auto'" (issue #10)
                assert grid and all(c.num_workers >= 0 for c in grid)
                assert 0 in {c.num_workers for c in grid} and len({c.num_workers for c in grid}) >= 2


# --- the ceiling model (issue #10, 3) -----------------------------------------------------


def _result(workers, samples_per_s, cpus_busy, runs=1, startup_cpu_s=0.0):
    """A configuration measured at ``samples_per_s`` with ``cpus_busy`` CPUs busy, steady."""
    config = LoaderConfig(workers, False, 128, 2, False, "fork")
    r = Result(config)
    for _ in range(runs):
        total_s, samples = 2.0, int(2.0 * samples_per_s)
        steady = samples * 3 // 4
        r.runs.append(
            Run(
                first_batch_s=0.1,
                steady_samples_per_s=samples_per_s,
                total_s=total_s,
                samples=samples,
                cpu_s=cpus_busy * total_s + startup_cpu_s,
                h2d_bytes_per_s=None,
                peak_uss_bytes=None,
                peak_shm_bytes=None,
                peak_fds=None,
                cuda=False,
                pin_memory_warning=False,
                steady_samples=steady,
                steady_cpu_s=cpus_busy * steady / samples_per_s,
            )
        )
    return r


def test_main_using_two_cores_is_not_above_the_ceiling():
    # The run: W=0 kept 1.93 CPUs busy (main's intra-op threads); one worker, one core.
    zero = _result(0, 1930.0, 1.93)
    one = _result(1, 950.0, 1.0)
    two = _result(2, 1850.0, 1.97)
    ceilings = output.ceiling([zero, one, two], 2.0, cpu_bound=True)
    assert set(ceilings) == {0, 1, 2}
    assert ceilings[0] == pytest.approx(2 / (1.93 / 1930.0))  # usable CPUs / least CPU per sample
    assert output.noise_warnings([zero, one, two], ceilings) == []
    assert zero.throughput / ceilings[0] == pytest.approx(1.93 / 2)


def test_a_run_above_what_the_cpus_can_do_is_flagged():
    # 2.2 CPUs busy on 2 usable ones: only a disturbed measurement (clock, window) says so.
    slow = _result(1, 900.0, 1.0)
    noisy = _result(0, 2200.0, 2.2)
    ceilings = output.ceiling([slow, noisy], 2.0, cpu_bound=True)
    assert ceilings[0] == pytest.approx(2000.0)
    (warning,) = output.noise_warnings([slow, noisy], ceilings)
    assert "W=0" in warning and "110%" in warning


def test_the_ceiling_uses_the_steady_windows_cpu_not_the_startup():
    spawned = _result(2, 1000.0, 2.0, startup_cpu_s=3.0)  # workers importing torch: 3 CPU-s before the first batch
    assert spawned.cpu_per_sample_s == pytest.approx(2.0 / 1000.0)
    assert spawned.runs[0].cpu_s / spawned.runs[0].samples > 1.5 * spawned.cpu_per_sample_s


def test_no_ceiling_when_not_cpu_bound_or_unmeasured():
    r = _result(0, 100.0, 1.0)
    assert output.ceiling([r], 2.0, cpu_bound=False) == {}
    r.runs[0].samples = 0
    r.runs[0].steady_samples = 0
    assert output.ceiling([r], 2.0, cpu_bound=True) == {}


# --- the probes' children find their modules from any folder (issue #10, 4) ---------------


def test_child_env_puts_the_package_root_first_and_keeps_the_rest(monkeypatch):
    monkeypatch.setattr("probes.env._site_dirs", lambda: set())
    env = child_env({"PYTHONPATH": "/a:/b", "X": "1"}, extra=["/cwd"])
    assert env["PYTHONPATH"].split(os.pathsep) == [PACKAGE_ROOT, "/cwd", "/a", "/b"] and env["X"] == "1"
    assert child_env({"PYTHONPATH": PACKAGE_ROOT})["PYTHONPATH"] == PACKAGE_ROOT


def test_child_env_leaves_site_packages_off_pythonpath(monkeypatch):
    monkeypatch.setattr("probes.env._site_dirs", lambda: {os.path.realpath(PACKAGE_ROOT)})
    assert child_env({})["PYTHONPATH"] == ""
