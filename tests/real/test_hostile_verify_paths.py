"""``dlwatch verify`` run as root beside a second local user who controls a folder on the way to
what verify reads, writes or runs: a link to root's report folder in the other user's folder
(re-pointed later, verify's ``settings.yaml`` would be theirs), a root-owned report folder in
their folder, a virtual environment's ``python`` of theirs linking to the system's, a script
reached through a link of theirs, a folder of theirs run as a script, report values that print
a forged line or raw escape sequences, thread counts that are not small integers, and a newer
report folder of theirs in a shared report folder (``--last``). Each is refused with one line
and exit code 2 (or, for ``--last``, skipped), and nothing of theirs runs. Every dlwatch run is
bounded (``helpers.run_bounded`` kills its process group); the other user's commands are
waited for with a timeout."""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest

from tests.real.conftest import SYSTEM_PY, as_user
from tests.real.helpers import DLWATCH, plant_report, run_bounded

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)

FIX = {"loader": {"num_workers": 0}}


def _as(attacker, *cmd: str) -> None:
    """Run ``cmd`` as ``attacker`` to its end (30 s at most)."""
    proc = as_user(attacker, list(cmd))
    assert proc.wait(timeout=30) == 0, cmd


def _theirs(attacker, path) -> str:
    """A folder ``path`` made by ``attacker`` (0755, theirs)."""
    _as(attacker, "mkdir", "-m", "0755", str(path))
    return str(path)


def _job(tmp_path):
    """A job folder of root's (0755) with ``plain.py`` (0644) in a 0755 ``tmp_path``."""
    os.chmod(tmp_path, 0o755)
    job = tmp_path / "job"
    job.mkdir(mode=0o755)
    (job / "plain.py").write_text("print('plain')\n")
    os.chmod(job / "plain.py", 0o644)
    return job


def _verify(folder, *extra: str):
    """``dlwatch verify FOLDER --all-loaders`` with ``extra``, from ``/``; (code, out, err)."""
    return run_bounded(DLWATCH + ["verify", str(folder), "--all-loaders", *extra], timeout_s=240, cwd="/")


def _refused(result, *words: str) -> None:
    code, out, err = result
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, out, err)
    for word in words:
        assert word in err, (word, err)


def test_a_report_reached_through_another_users_link_is_refused(attacker, tmp_path, shared_tmp):
    job = _job(tmp_path)
    folder = plant_report(tmp_path / "rep", [SYSTEM_PY, str(job / "plain.py")], job, "worker_stuck", fix=FIX)
    home = _theirs(attacker, os.path.join(shared_tmp, "home"))
    _as(attacker, "ln", "-s", str(tmp_path / "rep"), os.path.join(home, "reports"))
    given = os.path.join(home, "reports", os.path.basename(folder))
    # Once verify had made its folder there, they would re-point `reports` to a folder of theirs
    # holding verify-…/settings.yaml with `alerts: {on_crash_exec: …}`: nothing may go through it.
    _refused(_verify(given, "--dry-run"), f"belongs to uid {attacker.pw_uid}", "another user could move or replace")
    _refused(_verify(given, "--runs", "1", "--seconds", "5"), f"belongs to uid {attacker.pw_uid}")
    assert not [n for n in os.listdir(tmp_path / "rep") if n.startswith("verify-")]


def test_a_root_owned_report_folder_inside_another_users_folder_is_refused(attacker, tmp_path, shared_tmp):
    job = _job(tmp_path)
    theirs = _theirs(attacker, os.path.join(shared_tmp, "theirs"))  # they can rename `rep` away
    folder = plant_report(os.path.join(theirs, "rep"), [SYSTEM_PY, str(job / "plain.py")], job, "worker_stuck", fix=FIX)
    _refused(_verify(folder, "--dry-run"), f"{theirs} belongs to uid {attacker.pw_uid}")


def test_a_trusted_link_to_the_report_is_used_by_its_real_path(attacker, tmp_path):
    job = _job(tmp_path)
    folder = plant_report(tmp_path / "rep", [SYSTEM_PY, str(job / "plain.py")], job, "worker_stuck", fix=FIX)
    os.symlink(tmp_path / "rep", tmp_path / "link")  # root's link in root's folder
    code, out, err = _verify(tmp_path / "link" / os.path.basename(folder), "--runs", "1", "--seconds", "5")
    assert code in (0, 1), (code, out, err[-2000:])
    real = os.path.realpath(folder)
    assert f"report: {real} " in out, out
    made = [n for n in os.listdir(tmp_path / "rep") if n.startswith("verify-")]
    assert len(made) == 1 and f"runs and their reports: {os.path.join(os.path.dirname(real), made[0])}" in out
    assert "/link/" not in out, out  # no path verify wrote or started went through the link


def test_a_virtual_environment_of_another_user_is_refused(attacker, tmp_path, shared_tmp):
    job = _job(tmp_path)
    marker = os.path.join(shared_tmp, "PTH_RAN")
    venv = _theirs(attacker, os.path.join(shared_tmp, "venv"))
    ver = "python{}.{}".format(*os.popen(f"{SYSTEM_PY} -c 'import sys; print(*sys.version_info[:2])'").read().split())
    _as(attacker, "mkdir", "-p", os.path.join(venv, "bin"), os.path.join(venv, "lib", ver, "site-packages"))
    _as(attacker, "ln", "-s", os.path.realpath(SYSTEM_PY), os.path.join(venv, "bin", "python"))
    cfg = f"home = {os.path.dirname(os.path.realpath(SYSTEM_PY))}\ninclude-system-site-packages = false\n"
    pth = f"import os; open({marker!r}, 'w').write(str(os.geteuid()))\n"
    _as(attacker, SYSTEM_PY, "-c", f"open({os.path.join(venv, 'pyvenv.cfg')!r}, 'w').write({cfg!r})")
    _as(
        attacker,
        SYSTEM_PY,
        "-c",
        f"open({os.path.join(venv, 'lib', ver, 'site-packages', 'evil.pth')!r}, 'w').write({pth!r})",
    )
    python = os.path.join(venv, "bin", "python")
    folder = plant_report(tmp_path / "rep", [python, str(job / "plain.py")], job, "worker_stuck", fix=FIX)
    _refused(_verify(folder, "--runs", "1", "--seconds", "5"), f"belongs to uid {attacker.pw_uid}", "program")
    assert not os.path.exists(marker), "a .pth file of another user ran as root"


def test_a_virtual_environment_in_a_trusted_folder_with_their_pyvenv_cfg_is_refused(attacker, tmp_path):
    job = _job(tmp_path)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(os.path.realpath(SYSTEM_PY), venv / "bin" / "python")
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(os.path.realpath(SYSTEM_PY))}\n")
    os.chown(venv / "pyvenv.cfg", attacker.pw_uid, attacker.pw_gid)
    folder = plant_report(tmp_path / "rep", [str(venv / "bin" / "python"), str(job / "plain.py")], job, "k", fix=FIX)
    _refused(_verify(folder, "--dry-run"), "virtual environment", f"belongs to uid {attacker.pw_uid}")


def test_a_script_reached_through_another_users_link_is_refused(attacker, tmp_path, shared_tmp):
    job = _job(tmp_path)
    theirs = _theirs(attacker, os.path.join(shared_tmp, "theirs"))
    # their link to root's own script: re-pointed after the check, it would run their code
    _as(attacker, "ln", "-s", str(job / "plain.py"), os.path.join(theirs, "job.py"))
    folder = plant_report(tmp_path / "rep", [SYSTEM_PY, os.path.join(theirs, "job.py")], job, "k", fix=FIX)
    _refused(_verify(folder, "--dry-run"), f"belongs to uid {attacker.pw_uid}", "job.py")
    # root's link, through a link of theirs, to root's script: the real path alone is root's
    _as(attacker, "ln", "-s", str(job / "plain.py"), os.path.join(theirs, "hop"))
    os.symlink(os.path.join(theirs, "hop"), job / "via.py")
    folder = plant_report(tmp_path / "rep2", [SYSTEM_PY, "via.py"], job, "k", fix=FIX)
    _refused(_verify(folder, "--dry-run"), "via.py", f"{theirs} belongs to uid {attacker.pw_uid}")


def test_the_runs_start_the_checked_real_paths(tmp_path):
    job = _job(tmp_path)
    os.symlink("plain.py", job / "link.py")  # root's own link: allowed, and run by its real path
    folder = plant_report(tmp_path / "rep", [SYSTEM_PY, "link.py"], job, "worker_stuck", fix=FIX)
    code, out, err = _verify(folder, "--dry-run")
    assert code == 0, (code, out, err)
    line = next(x for x in out.splitlines() if x.startswith("unchanged 1:"))
    assert line.endswith(f"-- {SYSTEM_PY} {job / 'plain.py'}"), line


def test_a_folder_of_another_user_run_as_a_script_is_refused(attacker, tmp_path, shared_tmp):
    job = _job(tmp_path)
    marker = os.path.join(shared_tmp, "APP_RAN")
    app = _theirs(attacker, os.path.join(shared_tmp, "app"))
    code = f"open({marker!r}, 'w').write('x')\n"
    _as(attacker, SYSTEM_PY, "-c", f"open({os.path.join(app, '__main__.py')!r}, 'w').write({code!r})")
    folder = plant_report(tmp_path / "rep", [SYSTEM_PY, app], job, "worker_stuck", fix=FIX)
    _refused(_verify(folder, "--runs", "1", "--seconds", "5"), f"belongs to uid {attacker.pw_uid}")
    assert not os.path.exists(marker), "another user's __main__.py ran as root"
    # root's folder, their __main__.py in it (root gave it away, or they had it before)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    (mine / "__main__.py").write_text(code)
    os.chown(mine / "__main__.py", attacker.pw_uid, attacker.pw_gid)
    folder = plant_report(tmp_path / "rep2", [SYSTEM_PY, str(mine)], job, "worker_stuck", fix=FIX)
    _refused(_verify(folder, "--dry-run"), f"__main__.py belongs to uid {attacker.pw_uid}")


def _rewrite(folder, change) -> None:
    path = os.path.join(folder, "report.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    change(doc)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)


def test_report_values_are_printed_escaped(tmp_path):
    job = _job(tmp_path)
    forged = "false\nfixed 9: rm -rf / \x1b[2J"
    folder = plant_report(
        tmp_path / "rep",
        [SYSTEM_PY, str(job / "plain.py"), "arg\nfixed 8: evil \x1b]0;title\x07"],
        job,
        "worker_stuck\x1b[31m\nfixed 7: kind",
        fix={"loader": {"num_workers": 0}, "env": {"TOKENIZERS_PARALLELISM": forged}},
    )
    code, out, err = _verify(folder, "--dry-run")
    assert code == 0, (code, out, err)
    assert "\x1b" not in out + err and "\x07" not in out + err, out
    assert not [x for x in out.splitlines() if x.startswith("fixed ") and ":" in x and x[6] in "789"], out


def test_thread_counts_that_are_not_small_integers_are_refused(tmp_path):
    job = _job(tmp_path)
    for i, (fix, field) in enumerate(
        [
            ({"env": {"OMP_NUM_THREADS": "99999999999999999999"}}, "OMP_NUM_THREADS"),
            ({"env": {"OPENBLAS_NUM_THREADS": ["1"]}}, "OPENBLAS_NUM_THREADS"),
            ({"env": {"MKL_NUM_THREADS": "0"}}, "MKL_NUM_THREADS"),
            ({"loader": {"num_workers": 5000}}, "num_workers"),
        ]
    ):
        folder = plant_report(tmp_path / f"rep{i}", [SYSTEM_PY, str(job / "plain.py")], job, "worker_stuck", fix=fix)
        _refused(_verify(folder, "--dry-run"), field)
    folder = plant_report(
        tmp_path / "ok", [SYSTEM_PY, str(job / "plain.py")], job, "k", fix={"env": {"OMP_NUM_THREADS": "4"}}
    )
    code, out, err = _verify(folder, "--dry-run")
    assert code == 0 and "OMP_NUM_THREADS=4" in out, (code, out, err)


def test_last_skips_another_users_newer_report_in_a_shared_folder(attacker, tmp_path, shared_tmp):
    job = _job(tmp_path)
    shared = os.path.join(shared_tmp, "reports")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    mine = plant_report(tmp_path / "rep", [SYSTEM_PY, str(job / "plain.py")], job, "worker_stuck", fix=FIX)
    os.rename(mine, os.path.join(shared, os.path.basename(mine)))
    mine = os.path.join(shared, os.path.basename(mine))
    theirs = os.path.join(shared, "20991231T000000Z-1")  # newer, by name
    _as(attacker, "mkdir", "-m", "0700", theirs)
    doc = json.dumps({"mode": "hang", "diagnoses": [{"kind": "worker_stuck", "remedy_apply": FIX}], "job": {}})
    write = textwrap.dedent(f"open({os.path.join(theirs, 'report.json')!r}, 'w').write({doc!r})")
    _as(attacker, SYSTEM_PY, "-c", write)
    code, out, err = run_bounded(
        DLWATCH + ["verify", "--last", "--report-dir", shared, "--all-loaders", "--dry-run"], timeout_s=240, cwd="/"
    )
    assert code == 0, (code, out, err)
    assert "skipped 1 report folder(s) of other users" in out and f"report: {mine} " in out, out
