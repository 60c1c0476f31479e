"""Each ``dlwatch probe`` command states its run time on a 2-core VM in its ``--help``, and the
long ones print an estimate for the flags given when they start (issue #37 section 4: several
took 10-15 minutes without saying so)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from probes import cli as probes_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(probes_cli.COMMANDS[name][0].partition(":")[0]) is not None


@pytest.mark.parametrize("name", sorted(probes_cli.COMMANDS))
def test_every_command_s_help_states_its_run_time(name, capsys):
    if not _installed(name):
        pytest.skip(f"{probes_cli.COMMANDS[name][0]} is not in this tree")
    with pytest.raises(SystemExit) as e:
        probes_cli.run([name, "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Run time on a 2-core VM: " in out and " ".join(probes_cli.RUN_TIMES[name].split()) in out
    assert re.search(r"\d+ (s|min)\b", probes_cli.RUN_TIMES[name])


def _minutes_stated(name: str) -> tuple:
    """The first ``A-B min`` (or ``about N min``) range a command's run-time line states for no flags."""
    text = probes_cli.RUN_TIMES[name]
    m = re.search(r"with no flags[^;.]*?(?:about )?(\d+)(?:-(\d+))? min", text) or re.search(
        r"about (\d+)(?:-(\d+))? min", text
    )
    assert m, text
    return int(m.group(1)), int(m.group(2) or m.group(1))


def test_the_estimates_for_no_flags_fall_within_what_help_states():
    from probes import hook_cost, overhead, repro, rhythm
    from probes.bench import commands as bench

    figures = {
        "overhead": overhead.estimate_s(overhead.build_parser().parse_args([])),
        "hook-cost": hook_cost.estimate_s(len(hook_cost.LOADERS), 5),
    }
    for name in ("bench", "autotune", "seed-check"):
        args = bench.build_parser(name).parse_args([])
        configs = bench._seed_check_configs(args.batch_size_one) if name == "seed-check" else bench._grid(args)
        figures[name] = bench.estimate_s(name, args, configs)[0]
    for name, seconds in figures.items():
        low, high = _minutes_stated(name)
        assert low * 60 - 60 <= seconds <= high * 60 + 30, (name, seconds, probes_cli.RUN_TIMES[name])
    assert 100 <= rhythm.estimate_s(len(rhythm.VARIANTS), 1, 0) <= 150  # "all 9 variants took 125 s"
    assert f"all {len(rhythm.VARIANTS)} variants" in probes_cli.RUN_TIMES["rhythm"]
    for flag, count in (("--all", len(repro.SCENARIOS)), ("--cases", len(repro.CASE_SCENARIOS))):
        m = re.search(re.escape(flag) + r" \([^)]*\) about (\d+) min", probes_cli.RUN_TIMES["repro"])
        assert m, (flag, probes_cli.RUN_TIMES["repro"])  # the count grows with each case: the minutes hold within 20 %
        assert abs(repro.estimate_s(count, False) / 60 - int(m.group(1))) <= max(3, 0.2 * int(m.group(1)))


def test_minutes_reads_as_an_estimate():
    assert probes_cli.minutes(12) == "15 s" and probes_cli.minutes(61) == "2 min"
    assert probes_cli.minutes(3 * 3600 + 7 * 60) == "3 h 7 min"


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--dataset", "no_such_module_here:make"],  # estimated, then refused before any run
        ["hook-cost", "--rounds", "10", "--loaders", "in-process", "--timeout", "0.01"],
        ["rhythm", "1 worker", "--rounds", "5", "--timeout", "0.01"],
    ],
)
def test_a_long_probe_prints_its_estimate_when_it_starts(argv):
    if not _installed(argv[0]):
        pytest.skip("not in this tree")
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "probe", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    first = done.stderr.splitlines()[0] if done.stderr else ""
    assert re.match(rf"dlwatch probe {argv[0]}: expect about \d+ (s|min) on a 2-core machine \(", first), done.stderr


def test_a_short_run_prints_no_estimate(capsys):
    probes_cli.say_estimate("rhythm", 15.0, "1 variant")
    assert capsys.readouterr().err == ""
