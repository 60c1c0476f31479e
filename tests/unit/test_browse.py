"""Reading reports back (``dlwatch reports``, ``show``, ``show --html``) on a report written
here by the report builder and writer from captured fixtures."""

from __future__ import annotations

import os
from typing import List

import pytest

from tests.unit.builders import MAIN_PID, hang_facts
from watchdog.diagnose import diagnose
from watchdog.errors import ReportNotFound
from watchdog.report import browse, html, rendering, writer
from watchdog.report import document as report


def _written(tmp_path):
    facts = hang_facts([])
    rep = report.build(
        facts,
        diagnose(facts),
        {
            "pid": MAIN_PID,
            "cmdline": ["python", "train.py"],
            "start_time": None,
            "rank": {"RANK": "1"},
            "node": "node-a",
        },
        1.8e9,
        "report",
        None,
        {},
    )
    return writer.write(rep, str(tmp_path))


def test_reports_are_listed_newest_first_with_kind_rank_and_action(tmp_path):
    folder = _written(tmp_path)
    (tmp_path / ".half-written").mkdir()
    table, n = browse.listing(str(tmp_path))
    assert n == 1 and os.path.basename(folder) in table and " 1 " in table and "hang (" in table
    with pytest.raises(ReportNotFound):
        browse.listing(str(tmp_path / "nope"))


def _after_headline(text: str) -> List[str]:
    """The lines of ``text`` after its headline and the lines the headline was wrapped onto."""
    lines = text.splitlines()
    return [line for line in lines[1:] if not line.startswith("    ")] if lines else []


def test_show_prints_the_summary_and_refuses_a_folder_that_is_not_a_report(tmp_path):
    folder = _written(tmp_path)
    summary = browse.text(folder)
    assert summary.startswith("dlwatch: job hung") and rendering.STACKS_HEADING not in summary
    assert rendering.STACKS_HEADING in browse.text(folder, full=True)
    with pytest.raises(ReportNotFound):
        browse.text(str(tmp_path))


def test_show_prints_the_short_summary_stderr_got_and_full_the_whole_report(tmp_path):
    folder = _written(tmp_path)
    whole = browse.text(folder, full=True)
    short = browse.text(folder)
    # what stderr got when the report was written, and one line naming --full
    more = f"  more:   dlwatch show --full {folder} (evidence, processes, stacks)\n"
    assert short == rendering.short_summary(whole) + more
    assert "Evidence:" not in short and "Processes (" not in short and len(short.splitlines()) < 20
    assert "Evidence:" in whole and "Processes (" in whole and len(whole.splitlines()) > 40
    with open(os.path.join(folder, "report.txt"), encoding="utf-8") as f:
        assert whole == f.read()
    with pytest.raises(ReportNotFound):
        browse.text(str(tmp_path))


def test_the_html_page_is_self_contained_with_plots_and_collapsible_stacks(tmp_path):
    folder = _written(tmp_path)
    page = html.render(browse.load(folder), browse.text(folder, full=True))
    assert page.startswith("<!DOCTYPE html>") and 'id="evidence"' in page and "<details>" in page
    assert 'src="http' not in page and "<link" not in page and "<script" not in page  # nothing to fetch
    pytest.importorskip("matplotlib")
    assert page.count('src="data:image/png;base64,') >= 3
    path = browse.write_html(folder)
    assert path.endswith("report.html") and os.stat(path).st_mode & 0o777 == 0o600


def test_a_hand_edited_report_is_one_unreadable_row_not_a_crash(tmp_path):
    import json

    folder = _written(tmp_path)
    path = os.path.join(folder, "report.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for bad in (5, True, [1], {"a": 1}):
        doc["detected_at"] = bad
        doc["job"] = bad if isinstance(bad, list) else doc["job"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        table, n = browse.listing(str(tmp_path))
        assert n == 1 and os.path.basename(folder) in table


def test_the_html_page_never_replaces_a_device_a_fifo_or_a_link(tmp_path):
    folder = _written(tmp_path / "r")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    for out in ("/dev/null", str(fifo), str(link)):
        with pytest.raises(ReportNotFound, match="not a regular file"):
            browse.write_html(folder, out)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert link.is_symlink() and not (tmp_path / "elsewhere").exists()
    page = browse.write_html(folder, str(tmp_path / "page.html"))
    assert os.path.isfile(page)


def test_show_out_without_html_and_a_nan_timeout_are_usage_errors(capsys):
    from probes import cli as probes_cli
    from watchdog import cli

    assert cli.main(["show", "somewhere", "--out", "x.html"]) == 2
    assert "--out" in capsys.readouterr().err
    for command in ("rhythm", "hook-cost"):
        for bad in ("nan", "-1", "0", "1e999"):
            with pytest.raises(SystemExit) as e:
                probes_cli.main([command, "--timeout", bad])
            assert e.value.code == 2
            err = capsys.readouterr().err
            assert "--timeout" in err and err.count("\n") == 1


def test_show_takes_the_report_txt_path_dlwatch_prints(tmp_path, capsys):
    from watchdog import cli

    folder = _written(tmp_path)
    assert browse.report_folder(os.path.join(folder, "report.txt")) == folder
    assert browse.report_folder(folder) == folder
    assert cli.main(["show", os.path.join(folder, "report.txt")]) == 0
    assert capsys.readouterr().out.startswith("dlwatch: job hung")


def test_a_hang_s_outcome_is_listed_and_shown_after_its_headline(tmp_path):
    folder = _written(tmp_path)
    table, _ = browse.listing(str(tmp_path))
    assert "OUTCOME" in table.splitlines()[0] and " - " in table.splitlines()[2]  # a hang, no outcome yet
    writer.write_outcome(folder, {"outcome": "resolved", "summary": "resolved after 41 s", "resolved_after_s": 41.2})
    writer.write_outcome(folder, {"outcome": "job_ended", "summary": "the job ended with exit code 1", "exit_code": 1})
    table, _ = browse.listing(str(tmp_path))
    assert "job ended (exit 1)" in table  # the later outcome replaced the earlier one
    assert oct(os.stat(os.path.join(folder, writer.OUTCOME_FILE)).st_mode & 0o777) == "0o600"
    assert [n for n in os.listdir(folder) if n.startswith(".")] == []  # no temporary file left
    for full in (False, True):
        lines = _after_headline(browse.text(folder, full=full))
        assert lines[0].startswith("  outcome: the job ended with exit code 1"), lines


def test_a_verified_fix_is_listed_with_the_outcome_and_shown_with_its_runs(tmp_path):
    folder = _written(tmp_path)
    writer.write_outcome(folder, {"outcome": "terminated", "summary": "dlwatch ended the job"})
    verdict = "the fix holds: with multiprocessing_context='forkserver' 3/3 run(s) passed batch 74"
    writer.write_verify(folder, {"holds": True, "verdict": verdict, "folder": "/r/verify-1"})
    table, _ = browse.listing(str(tmp_path))
    assert "terminated; fix holds" in table
    lines = _after_headline(browse.text(folder))
    assert lines[0].startswith("  outcome: dlwatch ended the job")
    assert lines[1] == f"  verify: {verdict} (runs: /r/verify-1)"
    assert oct(os.stat(os.path.join(folder, writer.VERIFY_FILE)).st_mode & 0o777) == "0o600"
    writer.write_verify(folder, {"holds": False, "verdict": "not proven: the control did not hang in 1 run(s)"})
    assert "terminated; fix not proven" in browse.listing(str(tmp_path))[0]
    # an input-bound change verified by speed: a busy machine withholds, it does not refute
    busy = "withheld: the machine was busy (70% of its CPUs used by other processes, --busy-limit 0.5)"
    writer.write_verify(folder, {"holds": False, "verdict": busy, "throughput": {"state": "withheld"}})
    assert "terminated; withheld (machine busy)" in browse.listing(str(tmp_path))[0]
    writer.write_verify(folder, {"holds": False, "verdict": "no gain shown", "throughput": {"state": "noise"}})
    assert "terminated; no gain shown" in browse.listing(str(tmp_path))[0]


def test_the_html_page_of_a_verified_report_links_to_its_runs(tmp_path):
    pytest.importorskip("matplotlib")
    folder = _written(tmp_path)
    runs = os.path.join(str(tmp_path), "verify-20261202T000000Z-1")
    writer.write_verify(folder, {"holds": True, "verdict": "the fix holds: <3/3>", "folder": runs})
    page = open(browse.write_html(folder), encoding="utf-8").read()
    assert '<p id="verify"><b>Verify:</b> the fix holds: &lt;3/3&gt;.' in page
    assert 'href="../verify-20261202T000000Z-1/"' in page


def _stalled_doc():
    """A report document whose timeline has main waiting 6 s for a batch after two came."""
    loaders = [[100, 1, 0, 2, 0.5, None]] * 3 + [[100, 1, 0, 2, 0.5, w] for w in (1.0, 3.0, 6.0)]
    timeline = [
        {
            "t_mono": 10.0 + i,
            "shm_used_bytes": 0,
            "loaders": [loaders[i]],
            "processes": [{"role": "main", "pid": 100, "cpu_s": 0.1 * i, "rss_bytes": 2**20, "uss_bytes": None}],
        }
        for i in range(6)
    ]
    return {"timeline": timeline, "stall": {"stall_s": 3.0}}


def test_the_data_wait_plot_rises_through_a_stall():
    _, _, _, loaders = html._series(_stalled_doc())
    waits = [w for _, _, w in loaders["pid 100 iterator 1"]]
    assert waits == [0.5, 0.5, 0.5, 1.5, 3.5, 6.5]  # the wait in progress counts: not flat at 0.5


def test_an_empty_or_flat_plot_has_a_zero_based_axis_not_a_tiny_one():
    assert html.y_range([]) == (0.0, 1.0)
    assert html.y_range([("shm", [(0.0, 0.0), (1.0, 0.0)], "-")]) == (0.0, 1.0)
    assert html.y_range([("a", [(0.0, 2.0)], "-"), ("b", [(0.0, 10.0)], "-")]) == (0.0, 11.0)


def test_every_plot_puts_its_x_axis_at_the_same_place(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    spines = set()
    for title, png in html.plots(_stalled_doc()):
        path = tmp_path / "p.png"
        path.write_bytes(png)
        dark = matplotlib.image.imread(str(path))[:, :, :3].sum(axis=2) < 0.6
        columns = tuple(x for x in range(dark.shape[1]) if dark[:, x].mean() > 0.5 * html.AXES[3])
        assert columns, title  # the axes' left and right spines: dark most of the axes' height
        spines.add(columns)
    assert len(spines) == 1, spines


def test_report_folders_name_their_node_so_nodes_sharing_a_report_dir_never_collide():
    from watchdog.report import document as report_mod

    wall = 1796180000.0  # 2026-12-02 02:53:20 UTC
    assert report_mod.folder_name(wall, 42, "node-b") == "20261202T025320Z-node-b-42"
    assert report_mod.folder_name(wall, 42, "node-a") != report_mod.folder_name(wall, 42, "node-b")
    assert report_mod.folder_name(wall, 42, "../x/y") == "20261202T025320Z-_x_y-42"  # one plain path component
    assert report_mod.folder_name(wall, 42) == "20261202T025320Z-42"


def test_the_reports_table_has_a_node_column(tmp_path):
    folder = _written(tmp_path)
    table, n = browse.listing(str(tmp_path))
    header = table.splitlines()[0].split()
    assert n == 1 and header[:4] == ["TIME", "(UTC)", "NODE", "JOB"]
    assert browse.load(folder)["job"]["node"] == "node-a"
    assert "node-a" in table.splitlines()[2] and "-node-a-" in os.path.basename(folder)


def test_reports_takes_the_folder_as_run_does_with_report_dir(tmp_path, capsys):
    from watchdog import cli

    _written(tmp_path)
    assert cli.main(["reports", "--report-dir", str(tmp_path)]) == 0
    assert "node-a" in capsys.readouterr().out
    assert cli.main(["reports", str(tmp_path), "--report-dir", str(tmp_path / "other")]) == 2
    assert "differ: give one" in capsys.readouterr().err


# Report folders another user planted (a shared report_dir): each file is read without following
# a link, without blocking, capped, and parsed with a depth limit; one bad folder is one line.


def _plant(report_dir, name, files):
    """A report folder ``name`` in ``report_dir`` with ``files`` (name -> text, "FIFO", a
    ``("link", target)`` pair, or "SPARSE" for a 1 GiB file of holes)."""
    folder = report_dir / name
    folder.mkdir()
    for n, v in files.items():
        path = folder / n
        if v == "FIFO":
            os.mkfifo(path)
        elif isinstance(v, tuple):
            os.symlink(v[1], path)
        elif v == "SPARSE":
            with open(path, "wb") as f:
                f.truncate(2**30)
        else:
            path.write_text(v)
    return str(folder)


def _good_json(tmp_path):
    folder = _written(tmp_path / "model")
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as f:
        return f.read()


def _dlwatch(*args, timeout=60):
    """``dlwatch ARGS`` as a process of its own, killed after ``timeout`` seconds (a FIFO must
    not make it wait)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "watchdog", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, out, err


@pytest.mark.parametrize("name", ["report.json", "outcome.json", "verify.json", "report.txt"])
def test_a_fifo_in_a_report_folder_never_blocks_reports_or_show(tmp_path, name):
    good = _good_json(tmp_path)
    files = {"report.json": good, "report.txt": "dlwatch: job hung\n"}
    files[name] = "FIFO"
    (tmp_path / "r").mkdir()
    folder = _plant(tmp_path / "r", "20300101T000000Z-evil-1", files)
    _written(tmp_path / "r")  # a good report beside it stays listed
    code, out, err = _dlwatch("reports", str(tmp_path / "r"))
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 4 and "20300101T000000Z-evil-1" in lines[2] and "node-a" in lines[3]
    if name == "report.json":
        assert "not a regular file" in lines[2]
    code, out, err = _dlwatch("show", folder)
    if name in ("report.json", "report.txt"):
        assert code == 2 and err.count("\n") == 1 and "not a regular file" in err, err
    else:
        assert code == 0 and out.startswith("dlwatch: job hung"), err


def test_a_report_txt_linked_to_a_secret_file_is_never_printed(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    (tmp_path / "r").mkdir()
    folder = _plant(
        tmp_path / "r",
        "20300101T000000Z-evil-1",
        {"report.json": _good_json(tmp_path), "report.txt": ("link", str(secret)), "outcome.json": ("link", "x")},
    )
    with pytest.raises(ReportNotFound, match="a link is refused"):
        browse.text(folder, full=True)
    with pytest.raises(ReportNotFound, match="a link is refused"):
        browse.write_html(folder)
    assert not os.path.exists(os.path.join(folder, "report.html"))


def test_a_report_folder_that_is_a_link_is_not_listed_nor_shown(tmp_path):
    elsewhere = _written(tmp_path / "private")
    (tmp_path / "r").mkdir()
    os.symlink(elsewhere, tmp_path / "r" / "20300101T000000Z-evil-1")
    assert browse.folders(str(tmp_path / "r")) == []
    with pytest.raises(ReportNotFound, match="symbolic link"):
        browse.text(str(tmp_path / "r" / "20300101T000000Z-evil-1"))


def test_a_1_gib_sparse_report_json_is_refused_unread(tmp_path):
    (tmp_path / "r").mkdir()
    folder = _plant(tmp_path / "r", "20300101T000000Z-big-1", {"report.json": "SPARSE", "report.txt": "x"})
    code = (
        "import re, sys; from watchdog.report import browse; "
        "table, n = browse.listing(sys.argv[1]); "
        "print(n, re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
        "print(table)"
    )
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    head, _, table = done.stdout.partition("\n")
    n, max_rss_kib = (int(x) for x in head.split())
    assert n == 1 and "at most 64 MiB" in table
    # The 1 GiB was never read (2.1 GB before the cap). VmHWM is this process's own peak: ru_maxrss
    # would carry over the forking pytest's peak across exec (getrusage(2)).
    assert max_rss_kib < 300 * 1024, max_rss_kib
    with pytest.raises(ReportNotFound, match="at most 64 MiB"):
        browse.text(folder)


@pytest.mark.parametrize("name", ["report.json", "outcome.json", "verify.json"])
def test_a_deeply_nested_json_is_one_line_not_a_recursion_error(tmp_path, name):
    good = _good_json(tmp_path)
    files = {"report.json": good, "report.txt": "dlwatch: job hung\n"}
    files[name] = "[" * 100000 + "]" * 100000
    (tmp_path / "r").mkdir()
    folder = _plant(tmp_path / "r", "20300101T000000Z-deep-1", files)
    _written(tmp_path / "r")
    table, n = browse.listing(str(tmp_path / "r"))
    assert n == 2 and "node-a" in table
    if name == "report.json":
        assert "nested deeper than 64 levels" in table
        with pytest.raises(ReportNotFound, match="nested deeper"):
            browse.text(folder)
    else:
        assert browse.text(folder).startswith("dlwatch: job hung")  # the side file is left out
    with pytest.raises(ValueError, match="nested deeper than 3"):  # under the interpreter's limit too
        browse.parse_json(b'{"a": [[{"b": 1}]]}', max_depth=3)
    assert browse.parse_json(b'{"a": [[1]]}', max_depth=3) == {"a": [[1]]}


def test_terminal_escapes_in_a_planted_report_never_reach_the_terminal(tmp_path, capsys):
    import json

    from watchdog import cli

    doc = json.loads(_good_json(tmp_path))
    osc = "\x1b]52;c;ZXZpbA==\x07"  # an OSC 52 sequence: writes the terminal's clipboard
    doc["action"] = f"report{osc}\nforged line"
    doc["job"]["node"] = f"n{osc}"
    doc["diagnoses"][0]["kind"] = f"k{osc}"
    (tmp_path / "r").mkdir()
    folder = _plant(
        tmp_path / "r",
        f"20300101T000000Z-{osc}-1",
        {
            "report.json": json.dumps(doc),
            "report.txt": f"dlwatch: job hung {osc}\n\x1b[2Jbody\n",
            "outcome.json": json.dumps({"outcome": f"o{osc}", "summary": f"s{osc}\nforged", "at": f"a{osc}"}),
            "verify.json": json.dumps({"verdict": f"v{osc}", "folder": f"/f{osc}"}),
        },
    )
    assert cli.main(["reports", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]52" in out
    assert len(out.splitlines()) == 3  # the header, its rule, one line: no forged line
    for full in ([], ["--full"]):
        assert cli.main(["show", folder, *full]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and ("\\x1b[2J" in out or not full)
        assert "  outcome: s\\x1b]52;c;ZXZpbA==\\x07\\x0aforged" in out


@pytest.mark.parametrize("runs", ["javascript:alert(document.domain)", "data:text/html,<script>x</script>", 5])
def test_the_html_page_links_no_scheme_a_report_names(tmp_path, monkeypatch, runs):
    folder = _written(tmp_path)
    writer.write_verify(folder, {"holds": True, "verdict": "the fix holds", "folder": runs})
    monkeypatch.chdir(folder)  # where relpath would have turned "javascript:..." into itself
    page = open(browse.write_html(folder), encoding="utf-8").read()
    assert 'id="verify"' in page and 'id="verify-runs"' not in page and "href=" not in page
    assert html.render({"diagnoses": [{}]}, "", {"verdict": "x"}, "javascript:alert(1)").count("href=") == 0
    assert html.safe_href("https://grafana.example/d/x?a=1") and html.safe_href("../verify-1/")


def test_the_html_page_goes_into_the_folder_read_even_if_it_is_swapped_for_a_link_meanwhile(tmp_path, monkeypatch):
    """The race of a shared report_dir: the folder is renamed away and a link to a private
    folder put in its place while the plots render (played here from inside the render)."""
    folder = _written(tmp_path / "shared")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    real_render = html.render

    def swapped_meanwhile(*args, **kwargs):
        os.rename(folder, folder + ".moved")
        os.symlink(private, folder)
        return real_render(*args, **kwargs)

    monkeypatch.setattr(html, "render", swapped_meanwhile)
    assert browse.write_html(folder) == os.path.join(folder, "report.html")
    assert os.listdir(private) == []  # nothing written through the link
    assert os.path.isfile(folder + ".moved/report.html")  # the page is in the folder it was made of
    assert [n for n in os.listdir(folder + ".moved") if n.startswith(".")] == []


def test_show_html_out_never_writes_through_a_linked_folder(tmp_path):
    folder = _written(tmp_path / "r")
    private = tmp_path / "private"
    private.mkdir()
    os.symlink(private, tmp_path / "link")
    with pytest.raises(ReportNotFound, match="symbolic link"):
        browse.write_html(folder, str(tmp_path / "link" / "page.html"))
    assert os.listdir(private) == []


def test_a_temporary_folder_left_by_a_killed_write_is_swept_by_the_next_write(tmp_path):
    import time

    folder = _written(tmp_path)
    name = os.path.basename(folder)
    stale = tmp_path / f".{name}.ab_cd123"  # mkdtemp's name, its writer killed
    stale.mkdir(mode=0o700)
    (stale / "report.json").write_text("{")
    fresh = tmp_path / f".{name}.zz_fresh"  # being written now, by another dlwatch
    fresh.mkdir(mode=0o700)
    linked = tmp_path / f".{name}.linkxxxx"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    linked.symlink_to(outside)
    other = tmp_path / ".not-ours"  # not named as dlwatch names them
    other.mkdir()
    old = time.time() - writer.STALE_TEMP_S - 60
    for path in (stale, other):
        os.utime(path, (old, old))
    os.utime(linked, (old, old), follow_symlinks=False)
    _written(tmp_path)
    assert not stale.exists() and fresh.is_dir() and other.is_dir()
    assert linked.is_symlink() and (outside / "keep").exists()


def test_the_default_report_dir_is_not_used_through_a_link_or_when_open_to_others(tmp_path, monkeypatch):
    from watchdog.errors import ReportWriteError

    cwd = tmp_path / "cwd"
    cwd.mkdir(mode=0o700)
    monkeypatch.chdir(cwd)
    rep = report.build(*_build_args())
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (cwd / writer.DEFAULT_DIR).symlink_to(theirs)
    with pytest.raises(ReportWriteError, match="not used"):
        writer.write(rep, writer.DEFAULT_DIR)
    told: list = []
    (tmp_path / "tmp").mkdir(mode=0o700)
    path = writer.write_with_fallback(rep, writer.DEFAULT_DIR, told.append, fallback_base=str(tmp_path / "tmp"))
    assert os.listdir(theirs) == [] and path.startswith(str(tmp_path / "tmp")) and "not used" in told[0]
    (cwd / writer.DEFAULT_DIR).unlink()
    (cwd / writer.DEFAULT_DIR).mkdir(mode=0o777)
    os.chmod(cwd / writer.DEFAULT_DIR, 0o777)
    with pytest.raises(ReportWriteError, match="writable by others"):
        writer.write(rep, "./" + writer.DEFAULT_DIR)
    os.chmod(cwd / writer.DEFAULT_DIR, 0o755)
    assert os.path.dirname(writer.write(rep, writer.DEFAULT_DIR)) == writer.DEFAULT_DIR
    os.chmod(cwd, 0o777)  # a folder others may rename entries of (not sticky)
    with pytest.raises(ReportWriteError, match="rename"):
        writer.write(rep, writer.DEFAULT_DIR)


def _build_args():
    facts = hang_facts([])
    job = {"pid": MAIN_PID, "cmdline": ["python"], "start_time": None, "rank": {}, "node": "node-a"}
    return facts, diagnose(facts), job, 1.8e9, "report", None, {}


def test_a_report_with_a_number_too_large_for_a_float_is_one_line_not_a_traceback(tmp_path, capsys):
    import json

    from watchdog import cli

    pytest.importorskip("matplotlib")
    folder = _written(tmp_path)
    path = os.path.join(folder, "report.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc["timeline"][0]["processes"][0]["rss_bytes"] = 10**400  # OverflowError in a float division
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    assert cli.main(["show", "--html", folder]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be rendered" in err


def test_a_report_folder_swapped_for_a_link_while_written_is_never_written_through(tmp_path, monkeypatch):
    """A shared report_dir: another user renames the new temporary folder away and leaves a
    link to a folder of theirs in its place (played right after mkdtemp made it)."""
    import tempfile

    from watchdog.errors import ReportWriteError

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    real_mkdtemp = tempfile.mkdtemp

    def swapped(*args, **kwargs):
        made = real_mkdtemp(*args, **kwargs)
        os.rename(made, made + ".away")
        os.symlink(theirs, made)
        return made

    monkeypatch.setattr(tempfile, "mkdtemp", swapped)
    with pytest.raises(ReportWriteError):
        _written(tmp_path / "r")
    assert os.listdir(theirs) == []
    monkeypatch.undo()
    folder = _written(tmp_path / "r")
    writer.write_outcome(folder, {"outcome": "resolved", "summary": "s"})
    os.rename(folder, folder + ".away")
    os.symlink(theirs, folder)
    with pytest.raises(ReportWriteError):
        writer.write_outcome(folder, {"outcome": "resolved", "summary": "s"})
    assert os.listdir(theirs) == []


def test_the_html_headline_is_the_text_s_first_line_with_the_rank_and_the_outcome(tmp_path):
    folder = _written(tmp_path)
    first = browse.text(folder, full=True).splitlines()[0]
    assert "hang: " in first and "; cause: " in first and "rank 1 pid" in first
    page = html.render(browse.load(folder), browse.text(folder, full=True))
    assert f'<h1 id="title">{html._esc(first)}</h1>' in page
    assert '<p id="outcome"><b>Outcome:</b> none recorded' in page
    writer.write_outcome(folder, {"outcome": "terminated", "summary": "dlwatch ended the job", "at": "2027-01-15"})
    page = open(browse.write_html(folder), encoding="utf-8").read()
    assert '<p id="outcome"><b>Outcome:</b> dlwatch ended the job (2027-01-15)</p>' in page
    pytest.importorskip("matplotlib")
    assert [t for t, _ in html.plots(_stalled_doc()) if t.startswith("/dev/shm")] == [html.SHM_TITLE]
    assert "whole machine" in html.SHM_TITLE and f'alt="{html._esc(html.SHM_TITLE)}"' in page
