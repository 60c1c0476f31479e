"""The ``dlwatch probe`` command table and parsers, ``auto`` workers, the benchmarks' ceiling
model and the probes' child environment: no process is started and nothing is measured."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

import pytest

from probes import cli as probes_cli
from probes.bench import commands, output
from probes.bench.grid import LoaderConfig
from probes.bench.measure import Result, Run
from probes.env import PACKAGE_ROOT, child_env
from watchdog.cli import build_parser as dlwatch_parser
from watchdog.cli import main as dlwatch_main


def _readme_probe_lines():
    """Each ``dlwatch probe …`` command of the code blocks of README.md and docs/*.md, as words
    (comment dropped)."""
    from tests.unit.test_docs import pages

    lines = [m.group(1) for text in pages().values() for m in re.finditer(r"^(dlwatch probe [^\n]*)$", text, re.M)]
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


# --- bad flags: refused while parsing, one line naming the flag, before anything runs -------

# A probe flag with a bad value: (command, arguments, the flag). "{dir}" is a folder, "{file}"
# a regular file, "{fifo}" a FIFO.
BAD_FLAGS = [
    ("rhythm", ["--json", "/nonexistent-dlwatch/x.json"], "--json"),
    ("rhythm", ["--json", "{dir}"], "--json"),
    ("bench", ["--num-workers", "99999"], "--num-workers"),
    ("bench", ["--num-workers", "0,-1"], "--num-workers"),
    ("autotune", ["--num-workers", "auto,2000"], "--num-workers"),
    ("bench", ["--batch-size", "1,0"], "--batch-size"),
    ("bench", ["--prefetch-factor", "0"], "--prefetch-factor"),
    ("bench", ["--pin-memory", "maybe"], "--pin-memory"),
    ("bench", ["--persistent-workers", "true,"], "--persistent-workers"),
    ("bench", ["--multiprocessing-context", "fork,threads"], "--multiprocessing-context"),
    ("bench", ["--samples", "1"], "--samples"),
    ("bench", ["--sample-shape", "3,0"], "--sample-shape"),
    ("bench", ["--cpu-ms", "nan"], "--cpu-ms"),
    ("bench", ["--io-ms", "-1"], "--io-ms"),
    ("bench", ["--dataset", "no_colon"], "--dataset"),
    ("bench", ["--repeats", "0"], "--repeats"),
    ("bench", ["--warmup-batches", "-1"], "--warmup-batches"),
    ("bench", ["--csv", "{file}/x.csv"], "--csv"),
    ("bench", ["--plot", "{fifo}"], "--plot"),
    ("seed-check", ["--batch-size", "0"], "--batch-size"),
    ("seed-check", ["--samples", "x"], "--samples"),
    ("seed-check", ["--json", "/nonexistent-dlwatch/x.json"], "--json"),
    ("hook-cost", ["--rounds", "0"], "--rounds"),
    ("hook-cost", ["--loaders", "typical,,"], "--loaders"),
    ("hook-cost", ["--json", "{dir}"], "--json"),
    ("overhead", ["--workers", "2000"], "--workers"),
    ("overhead", ["--pairs", "0"], "--pairs"),
    ("overhead", ["--seconds", "nan"], "--seconds"),
    ("overhead", ["--seconds", "1e300"], "--seconds"),  # finite, but overflows a deadline
    ("bench", ["--plot", "/tmp/throughput.txt"], "--plot"),  # matplotlib would refuse it after the runs
    ("bench", ["--plot", "/tmp/throughput"], "--plot"),  # … or silently write throughput.png
    ("overhead", ["--warmup", "1e300"], "--warmup"),
    ("overhead", ["--stall-timeout", "1e300"], "--stall-timeout"),
    ("rhythm", ["--timeout", "1e300"], "--timeout"),
    ("hook-cost", ["--timeout", "1e300"], "--timeout"),
    ("overhead", ["--warmup", "-1"], "--warmup"),
    ("overhead", ["--interval", "61"], "--interval"),
    ("overhead", ["--stall-timeout", "0"], "--stall-timeout"),
    ("overhead", ["--timeline-samples", "9"], "--timeline-samples"),
    ("overhead", ["--full-timeline-interval", "0.05"], "--full-timeline-interval"),
    ("overhead", ["--json", "/nonexistent-dlwatch/x.json"], "--json"),
    ("repro", ["--report-dir", "{file}", "healthy_slow_samples"], "--report-dir"),
]


@pytest.fixture
def nothing_may_run(monkeypatch):
    """Every probe's measuring entry point fails the test when called, and bench's measuring
    modules (which import torch) cannot be imported: a bad flag must be refused before."""
    from probes import hook_cost, overhead, repro, rhythm

    def ran(*_a, **_k):
        raise AssertionError("a bad flag got past parsing: a run started")

    for module, name in (
        (rhythm, "measure_variant"),
        (hook_cost, "measure"),
        (overhead, "run_job"),
        (overhead, "run_hang"),
        (overhead, "run_full_timeline"),
        (repro, "run_scenario"),
    ):
        monkeypatch.setattr(module, name, ran)
    for name in commands.COMMANDS:
        monkeypatch.setitem(commands.COMMANDS, name, ran)
    monkeypatch.setitem(sys.modules, "probes.bench.datasets", None)
    monkeypatch.setitem(sys.modules, "probes.bench.measure", None)


@pytest.mark.parametrize("command, argv, flag", BAD_FLAGS, ids=[f"{c}{a[0]}={a[1]}" for c, a, _ in BAD_FLAGS])
def test_a_bad_probe_flag_is_one_line_naming_it_before_anything_runs(
    command, argv, flag, tmp_path, nothing_may_run, capsys
):
    if not _installed(command):
        pytest.skip(f"{probes_cli.COMMANDS[command][0]} is not in this tree")
    a_file, fifo = tmp_path / "a-file", tmp_path / "fifo"
    a_file.write_text("x")
    os.mkfifo(fifo)
    argv = [a.format(dir=tmp_path, file=a_file, fifo=fifo) for a in argv]
    with pytest.raises(SystemExit) as e:
        dlwatch_main(["probe", command, *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"dlwatch: error: {flag} {argv[1][:40]}"), err  # the flag and its value, first
    # Only that flag: a joint message ("--pairs must be at least 1, --seconds …") names others.
    assert set(re.findall(r"--[a-z][a-z-]+", err)) == {flag, "--help"}, err
    assert f"(see `dlwatch probe {command} --help`)" in err, err


def test_report_dir_naming_a_file_says_not_a_folder(short_tmp_path, nothing_may_run, capsys):
    a_file = short_tmp_path / "a-file"  # the error cuts a value past its length
    a_file.write_text("x")
    for report_dir, what in ((a_file, "not a folder"), (a_file / "sub", f"{a_file} is not a folder")):
        with pytest.raises(SystemExit) as e:
            probes_cli.run(["repro", "--report-dir", str(report_dir), "healthy_slow_samples"])
        assert e.value.code == 2
        assert capsys.readouterr().err.startswith(f"dlwatch: error: --report-dir {report_dir}: {what} (see ")


def test_a_grid_that_needs_too_many_samples_is_refused_before_torch(nothing_may_run, capsys):
    for argv, needle in (
        (["bench", "--samples", "100", "--num-workers", "4"], "--samples 100 is too few"),
        (["bench", "--batch-size", "65536", "--num-workers", "1024", "--warmup-batches", "10000"], "over 100000000"),
    ):
        with pytest.raises(SystemExit) as e:
            probes_cli.run(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and needle in err and "`dlwatch probe bench --help`" in err, err


def test_worker_and_count_bounds_are_in_each_commands_help(capsys):
    for command, needles in (
        ("bench", ["each from 0 to 1024", "from 1 to 65536", "from 1 to 100"]),
        ("seed-check", ["from 1 to 65536", "from 2 to 100000000"]),
        ("overhead", ["each from 1 to 1024", "from 0.1 to 60", "from 10 to 100000"]),
        ("hook-cost", ["from 1 to 1000"]),
    ):
        if not _installed(command):
            continue
        with pytest.raises(SystemExit):
            probes_cli.run([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        for needle in needles:
            assert needle in out, (command, needle)


def test_list_and_range_types():
    workers = probes_cli.int_list(0, 1024, ["auto"])
    assert workers("0, 4,auto") == "0, 4,auto"
    for bad in ("", ",", "1,,2", "1025", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            workers(bad)
    assert probes_cli.choice_list(["a", "B"], ignore_case=True)("A,b") == "A,b"
    with pytest.raises(argparse.ArgumentTypeError):
        probes_cli.choice_list(["a"])("A")
    assert probes_cli.float_range(0.1, 60)("60") == 60.0
    for bad in ("0.09", "60.1", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            probes_cli.float_range(0.1, 60)(bad)
    assert probes_cli.int_range(1)("99999999") == 99999999
    with pytest.raises(argparse.ArgumentTypeError):
        probes_cli.int_range(1, 10)("11")


def test_output_file_refuses_what_writing_would_block_on_or_replace(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    assert probes_cli.output_file(str(tmp_path / "old.json")) == str(tmp_path / "old.json")
    assert probes_cli.output_file(str(tmp_path / "new.json")) == str(tmp_path / "new.json")
    os.symlink(tmp_path / "old.json", tmp_path / "link.json")
    for bad in ("", str(tmp_path), str(tmp_path / "link.json"), "/dev/null", "/nonexistent-dlwatch/x", "a\0b"):
        with pytest.raises(argparse.ArgumentTypeError):
            probes_cli.output_file(bad)


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
            commands._check_grid(own, name)
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


def test_a_probes_private_tmpdir_goes_with_what_its_jobs_left_and_tmpdir_is_restored(tmp_path, monkeypatch):
    import shutil
    import subprocess
    import sys
    import tempfile

    from probes.env import private_tmpdir

    short = tempfile.mkdtemp(prefix="t", dir="/tmp")  # pytest's tmp_path is too deep for sockets
    try:
        monkeypatch.setenv("TMPDIR", short)
        monkeypatch.setattr(tempfile, "tempdir", None)
        with private_tmpdir() as folder:
            assert folder is not None and os.path.dirname(folder) == short
            # a child that leaves a folder in its TMPDIR, as a job killed with SIGKILL does
            subprocess.run([sys.executable, "-c", "import tempfile; tempfile.mkdtemp(prefix='pymp-')"], check=True)
            assert any(name.startswith("pymp-") for name in os.listdir(folder))
        assert os.listdir(short) == [] and os.environ["TMPDIR"] == short and tempfile.tempdir is None
    finally:
        shutil.rmtree(short, ignore_errors=True)
    # A TMPDIR so deep that multiprocessing's sockets one level deeper would not fit in
    # sun_path: nothing is changed.
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    with private_tmpdir() as folder:
        assert folder is None and os.environ["TMPDIR"] == str(deep)
    assert os.listdir(deep) == []


# --- judging a reproduction's reports ---------------------------------------------------------------


def _doc(mode, kind):
    return {"mode": mode, "diagnoses": [{"kind": kind, "remedy": "", "evidence": []}]}


def test_a_crash_scenario_that_may_hang_counts_its_hang_report_and_a_strict_one_says_what_it_got():
    from probes import repro

    racy = repro.BY_NAME["shm_exhausted"]
    assert racy.or_hang
    ok, chosen, kinds, why = repro._judge(racy, [("r1", _doc("hang", "shm_exhausted"))], 124)
    assert ok and chosen[0] == "r1" and kinds[0] == "shm_exhausted", why
    ok, _, _, why = repro._judge(racy, [("r1", _doc("hang", "batch_lost"))], 124)
    assert not ok and "first diagnosis batch_lost" in why
    strict = repro.BY_NAME["worker_killed"]
    ok, chosen, _, why = repro._judge(strict, [("r1", _doc("hang", "worker_killed"))], 124)
    assert not ok and chosen is None and why == "no crash report (only: hang worker_killed)"


def test_the_sidecars_cpu_counts_threads_that_ended():
    # A rank's watcher thread ends with its rank, at the end of the window: its CPU must stay
    # in the total (a sum over live threads only once made a node's cost negative).
    import os
    import threading
    import time

    from probes import overhead

    before = overhead._cpu_s(os.getpid())

    def burn():
        t = time.thread_time()
        while time.thread_time() - t < 0.3:
            pass

    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    after = overhead._cpu_s(os.getpid())
    assert before is not None and after is not None and after - before >= 0.25, (before, after)


def test_the_matmul_job_keeps_mains_intra_op_threads(tmp_path):
    # --matmul: the job users run (a 64 x 64 matmul per sample, main with torch's default
    # intra-op threads); the default job sets one thread in main.
    from probes import overhead

    plain = overhead._job_command(overhead.Shape(8), 1.0, 2.0, str(tmp_path))
    users = overhead._job_command(overhead.Shape(8, ranks=8, matmul=True), 1.0, 2.0, str(tmp_path))
    assert plain[-1] == "-" and users[-1] == "matmul"
    assert overhead.Shape(8, ranks=8, matmul=True).label == "8 x (1 + 8), matmul"
    assert "if not matmul:" in overhead.JOB and "torch.set_num_threads(1)" in overhead.JOB
    args = overhead.build_parser().parse_args(["--matmul"])
    assert args.matmul
