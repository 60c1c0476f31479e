"""``dlwatch``'s own usage errors: one line naming the flag, pointing to the subcommand's own
help, exit code 2, before any job starts; and what ``dlwatch run`` says when the job's command
cannot be started (as bash says it). Nothing here starts a job."""

from __future__ import annotations

import argparse
import os
import subprocess

import pytest

from watchdog import argtypes, cli
from watchdog.commands import run as run_cmd
from watchdog.exits import Exit


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(argv)
    assert e.value.code == Exit.USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "argv, help_of",
    [
        (["attach", "--pid", "1", "--bogus"], "dlwatch attach"),
        (["run", "--bogus", "--", "true"], "dlwatch run"),
        (["status", "--pid", "1", "extra"], "dlwatch status"),
        (["reports", "-n", "0"], "dlwatch reports"),
        (["--bogus", "reports"], "dlwatch"),
    ],
    ids=["attach-unknown-flag", "run-unknown-flag", "status-extra-argument", "reports-bad-n", "dlwatch-own-flag"],
)
def test_a_usage_error_points_to_the_help_of_the_command_it_belongs_to(argv, help_of, capsys):
    err = _usage_error(argv, capsys)
    assert err.endswith(f"(see `{help_of} --help`)\n"), err


@pytest.mark.parametrize("command", ["run", "attach"])
def test_report_dir_naming_a_file_is_not_a_folder(command, short_tmp_path, capsys):
    tmp_path = short_tmp_path  # the error cuts a value past its length
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    os.symlink(tmp_path / "nothing", tmp_path / "dangling")
    target = ["--", "true"] if command == "run" else ["--pid", "1"]
    for report_dir, what in (
        (a_file, "not a folder"),
        (a_file / "sub" / "deeper", f"{a_file} is not a folder"),
        (tmp_path / "dangling", "not a folder"),
    ):
        err = _usage_error([command, "--report-dir", str(report_dir), *target], capsys)
        assert err.startswith(f"dlwatch: error: --report-dir {report_dir}: {what} (see `dlwatch {command} --help`)")
    args = cli.build_parser().parse_args([command, "--report-dir", str(tmp_path / "new" / "deeper"), *target])
    assert args.report_dir == str(tmp_path / "new" / "deeper")  # made when a report is written


def test_a_huge_bad_value_is_cut_and_the_help_hint_kept(capsys):
    err = _usage_error(["reports", "-n", "9" * 5000], capsys)
    assert len(err) < 300 and err.startswith("dlwatch: error: -n 999") and "`dlwatch reports --help`" in err


def _script(path, first_line: bytes, mode: int = 0o755) -> str:
    path.write_bytes(first_line + b"\necho hi\n")
    path.chmod(mode)
    return str(path)


def _exec_error(program: str) -> OSError:
    with pytest.raises(OSError) as e:
        subprocess.Popen([program])
    return e.value


def test_a_script_whose_interpreter_is_missing_names_it_as_bash_does(tmp_path):
    script = _script(tmp_path / "job.sh", b"#!/nonexistent-dlwatch/python9 -u")
    assert run_cmd.start_failure(script, _exec_error(script), os.defpath) == (
        "bad interpreter /nonexistent-dlwatch/python9: No such file or directory",
        Exit.NOT_FOUND,  # bash: 127 for ENOENT, "bad interpreter" included
    )
    crlf = _script(tmp_path / "crlf.sh", b"#!/bin/sh\r")  # saved with Windows line ends
    why, code = run_cmd.start_failure(crlf, _exec_error(crlf), os.defpath)
    assert why == "bad interpreter '/bin/sh\\r': No such file or directory" and code == Exit.NOT_FOUND
    # Found on PATH: the same, for the file PATH found.
    why, code = run_cmd.start_failure("job.sh", _exec_error(script), str(tmp_path))
    assert why.startswith("bad interpreter /nonexistent-dlwatch/python9") and code == Exit.NOT_FOUND


def test_an_interpreter_that_cannot_be_executed_is_126_and_named(tmp_path):
    not_executable = _script(tmp_path / "data.txt", b"plain text", 0o644)
    script = _script(tmp_path / "job.sh", b"#!" + not_executable.encode())
    assert run_cmd.start_failure(script, _exec_error(script), os.defpath) == (
        f"bad interpreter {not_executable}: Permission denied",
        Exit.CANNOT_EXECUTE,
    )
    assert run_cmd.start_failure(not_executable, _exec_error(not_executable), os.defpath) == (
        "Permission denied",
        Exit.CANNOT_EXECUTE,
    )


def test_a_missing_command_or_file_is_127(tmp_path):
    missing = str(tmp_path / "nope")
    assert run_cmd.start_failure(missing, _exec_error(missing), os.defpath) == (
        "No such file or directory",
        Exit.NOT_FOUND,
    )
    name = "no-such-command-dlwatch"
    assert run_cmd.start_failure(name, FileNotFoundError(2, "No such file or directory"), str(tmp_path)) == (
        "command not found",
        Exit.NOT_FOUND,
    )


def test_dlwatch_run_says_bad_interpreter_in_one_line(tmp_path, capfd):
    script = _script(tmp_path / "job.sh", b"#!/nonexistent-dlwatch/python9")
    config = tmp_path / "c.yaml"
    config.write_text("stderr_tail_bytes: 0\n")  # no stderr pump: nothing but the failed exec starts
    assert cli.main(["run", "--no-hook", "--config", str(config), "--", script]) == Exit.NOT_FOUND
    err = capfd.readouterr().err
    assert err == (
        f"dlwatch: cannot start {script!r}: bad interpreter /nonexistent-dlwatch/python9: No such file or directory\n"
    )


def test_dlwatch_run_runs_the_first_program_on_path_as_bash_does(tmp_path, monkeypatch, capfd):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    _script(first / "job", b"#!/nonexistent-dlwatch/python9")
    marker = tmp_path / "the-other-program-ran"
    (second / "job").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (second / "job").chmod(0o755)
    monkeypatch.setenv("PATH", f"{first}:{second}:{os.defpath}")
    config = tmp_path / "c.yaml"
    config.write_text("stderr_tail_bytes: 0\n")
    assert cli.main(["run", "--no-hook", "--config", str(config), "--", "job"]) == Exit.NOT_FOUND
    assert not marker.exists()  # Python's own PATH search would have gone on to second/job
    assert "bad interpreter /nonexistent-dlwatch/python9" in capfd.readouterr().err


def test_folder_and_positive_int_types(tmp_path):
    assert argtypes.folder(str(tmp_path)) == str(tmp_path)
    for bad in ("", "a\0b"):
        with pytest.raises(argparse.ArgumentTypeError):
            argtypes.folder(bad)
    assert argtypes.positive_int("3") == 3
    for bad in ("0", "-1", "x", "1.0"):
        with pytest.raises(argparse.ArgumentTypeError):
            argtypes.positive_int(bad)


def test_an_out_of_range_flag_points_to_the_commands_help(capfd):
    assert cli.main(["run", "--interval", "0", "--", "true"]) == Exit.USAGE
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "--interval" in err and "(see `dlwatch run --help`)" in err, err


def test_show_names_a_folder_that_does_not_exist(tmp_path):
    from watchdog.errors import ReportNotFound
    from watchdog.report import browse

    for folder, why in ((tmp_path / "missing", "no such folder"), (tmp_path, "not a report folder")):
        try:
            browse.load(str(folder))
        except ReportNotFound as e:
            assert why in str(e) and str(folder) in str(e)
        else:
            raise AssertionError(folder)


def test_help_imports_no_command_and_no_watcher():
    # Each command's module is imported when it runs: `dlwatch … --help` (and a usage error)
    # builds the parser only, without the watch loop, detection or diagnosis behind the commands.
    import re
    import sys

    from tests.unit.builders import ROOT

    for argv in (["--help"], ["run", "--help"], ["attach", "--help"]):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "watchdog", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert done.returncode == 0 and done.stdout.startswith("usage: dlwatch"), done.stderr[-2000:]
        imported = set(re.findall(r"\|\s+(watchdog(?:\.\w+)*)\s*$", done.stderr, re.M))
        assert "watchdog.commands.parser" in imported, sorted(imported)
        heavy = sorted(
            m
            for m in imported
            if m.startswith(("watchdog.watch", "watchdog.detect", "watchdog.diagnose"))
            or m in {f"watchdog.commands.{c}" for c in ("run", "attach", "status", "dump", "show", "reports")}
        )
        assert not heavy, (argv, heavy)
