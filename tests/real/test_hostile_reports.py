"""Report folders another local user plants where a root dlwatch reads or writes reports (a
shared ``report_dir``, a shared working directory): each attack is played by an unprivileged
user made for the module (removed after), against ``dlwatch reports``, ``show``, ``show --html``
and ``run`` as root, and the test asserts what must not happen (a command that never returns,
root's file printed, root's page or report written where the attacker chose)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

from tests.real.conftest import SYSTEM_PY, as_user
from tests.real.helpers import DLWATCH, run_bounded
from tests.unit.test_browse import _written
from watchdog.report import browse, html

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)

# The attacker's planting script: FOLDER, then NAME=KIND pairs (KIND: fifo, link:TARGET, or
# text read from the JSON object on stdin under NAME).
_PLANT = """
import json, os, sys
folder, files = sys.argv[1], json.load(sys.stdin)
os.mkdir(folder, 0o755)
for item in sys.argv[2:]:
    name, kind = item.split("=", 1)
    path = os.path.join(folder, name)
    if kind == "fifo":
        os.mkfifo(path, 0o666)
    elif kind.startswith("link:"):
        os.symlink(kind[5:], path)
    else:
        with open(path, "w") as f:
            f.write(files[name])
"""


def _plant(attacker, folder, files, *items):
    proc = as_user(attacker, [SYSTEM_PY, "-c", _PLANT, folder, *items], stdin=subprocess.PIPE, text=True)
    proc.communicate(json.dumps(files), timeout=30)
    assert proc.returncode == 0


def _report_json(tmp_path) -> str:
    folder = _written(tmp_path / "model")
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("name", ["outcome.json", "report.json", "verify.json", "report.txt"])
def test_a_fifo_another_user_plants_in_a_shared_report_dir_never_hangs_reports_or_show(
    attacker, shared_tmp, tmp_path, name
):
    good = _written(pathlib.Path(shared_tmp))  # root's own report, beside it
    folder = os.path.join(shared_tmp, "20300101T000000Z-evil-1")
    files = {"report.json": _report_json(tmp_path), "report.txt": "dlwatch: job hung\n"}
    _plant(attacker, folder, files, *[f"{n}=text" for n in files if n != name], f"{name}=fifo")
    t0 = time.monotonic()
    code, out, err = run_bounded(DLWATCH + ["reports", shared_tmp], 30)
    assert code == 0, err
    assert os.path.basename(good) in out and "20300101T000000Z-evil-1" in out
    code, out, err = run_bounded(DLWATCH + ["show", folder], 30)
    if name in ("report.json", "report.txt"):
        assert code == 2 and err.count("\n") == 1 and "not a regular file" in err, err
    else:
        assert code == 0 and out.startswith("dlwatch: job hung"), err
    assert time.monotonic() - t0 < 60


def test_root_s_show_never_prints_a_file_a_planted_report_txt_links_to(attacker, shared_tmp, tmp_path):
    with open("/etc/shadow", encoding="utf-8") as f:
        secret = f.readline().strip()
    folder = os.path.join(shared_tmp, "20300101T000000Z-evil-1")
    _plant(attacker, folder, {"report.json": _report_json(tmp_path)}, "report.json=text", "report.txt=link:/etc/shadow")
    for args in (
        ["show", folder],
        ["show", "--full", folder],
        ["show", "--html", "--out", str(tmp_path / "p.html"), folder],
    ):
        code, out, err = run_bounded(DLWATCH + args, 60)
        assert code == 2 and err.count("\n") == 1 and "a link is refused" in err, (args, err)
        assert secret not in out and secret not in err
    assert not (tmp_path / "p.html").exists()


def test_show_html_writes_into_the_folder_it_read_even_if_another_user_swaps_it_for_a_link(
    attacker, shared_tmp, tmp_path, monkeypatch
):
    """The race of issue #33: while matplotlib renders, the attacker renames their report
    folder away and puts a link to a root-only folder in its place (played at that moment
    from inside the render, so that the race is won every time)."""
    theirs = os.path.join(shared_tmp, "attacker-reports")
    _plant(attacker, theirs, {})
    folder = os.path.join(theirs, "20300101T000000Z-evil-1")
    _plant(
        attacker,
        folder,
        {"report.json": _report_json(tmp_path), "report.txt": "x\n"},
        "report.json=text",
        "report.txt=text",
    )
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    real_render = html.render

    def swapped_meanwhile(*args, **kwargs):
        swap = as_user(
            attacker,
            [
                SYSTEM_PY,
                "-c",
                "import os, sys; os.rename(sys.argv[1], sys.argv[1] + '.moved'); os.symlink(sys.argv[2], sys.argv[1])",
                folder,
                str(root_only),
            ],
        )
        assert swap.wait(30) == 0
        return real_render(*args, **kwargs)

    monkeypatch.setattr(html, "render", swapped_meanwhile)
    browse.write_html(folder)
    assert os.path.islink(folder)  # the swap happened
    assert os.listdir(root_only) == [], "root wrote through the attacker's link"
    assert os.path.isfile(folder + ".moved/report.html")


@pytest.mark.parametrize("squat", ["link", "folder"])
def test_a_dlwatch_reports_another_user_made_in_a_shared_working_directory_is_never_written_to(
    attacker, shared_tmp, tmp_path, squat
):
    theirs = os.path.join(shared_tmp, "attacker-own")
    code = as_user(
        attacker,
        [
            SYSTEM_PY,
            "-c",
            "import os, sys; own, squat, kind = sys.argv[1:]; os.mkdir(own); os.chmod(own, 0o777); "
            "(os.mkdir(squat), os.chmod(squat, 0o777)) if kind == 'folder' else os.symlink(own, squat)",
            theirs,
            os.path.join(shared_tmp, "dlwatch-reports"),
            squat,
        ],
    ).wait(30)
    assert code == 0
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    env = {**os.environ, "TMPDIR": str(tmp)}
    job = [SYSTEM_PY, "-c", "import os, time; time.sleep(1.5); os.kill(os.getpid(), 9)"]  # a crash report
    code, _out, err = run_bounded(DLWATCH + ["run", "--"] + job, 60, env=env, cwd=shared_tmp)
    assert code == 137, err
    written = [line.split("full report: ")[1].strip() for line in err.splitlines() if "full report: " in line]
    assert written, err
    assert os.listdir(theirs) == [] and os.listdir(os.path.join(shared_tmp, "dlwatch-reports")) == []
    assert os.path.realpath(written[0]).startswith(str(tmp) + "/"), err  # the fallback folder
    assert "not used" in err


def test_a_temporary_folder_another_user_plants_in_a_shared_report_dir_is_not_swept(attacker, shared_tmp, tmp_path):
    name = ".20300101T000000Z-evil-1.abcdefgh"  # named as a killed write's
    _plant(attacker, os.path.join(shared_tmp, name), {"keep": "theirs"}, "keep=text")
    old = time.time() - 24 * 3600  # older than any sweep waits
    os.utime(os.path.join(shared_tmp, name), (old, old))
    _written(pathlib.Path(shared_tmp))
    assert os.path.isfile(os.path.join(shared_tmp, name, "keep"))
