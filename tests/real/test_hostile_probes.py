"""The probes run as root beside a local user they do not trust: that user owns the folder root
runs a probe from (a shared project folder, a folder in /tmp) and the folder a ``--json`` file
goes to. A ``torch.py`` planted there must never be imported by a probe's children (they run as
root), and a link planted at the output's path or a temporary name beside it must never be
written through. Each attack is played for real by an unprivileged user made for the test."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.real.conftest import SYSTEM_PY, as_user
from tests.real.helpers import PY, ROOT, run_bounded

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="plays a second local user (needs root and useradd)"
)

# dlwatch as its console script starts: the script's folder, not the working directory, first on
# sys.path (-P), so that only the probe's own children could import from the working directory.
DLWATCH_SCRIPT = [PY, "-P", "-m", "watchdog"]

# The planted module: leaves a mark naming the uid it ran as, then fails the import.
PLANTED_TORCH = "import os\nopen({mark!r}, 'a').write('ran as uid %d\\n' % os.getuid())\nraise SystemExit(7)\n"


def _attacker_folder(attacker, shared_tmp: str, victim: str = "") -> str:
    """A folder of the attacker's (0755, not sticky) in ``shared_tmp`` holding a planted
    ``torch.py`` and links ``out.json.tmp`` and ``.out.json.tmp`` to ``victim`` when given;
    the mark the planted module leaves is ``shared_tmp/mark``."""
    folder = os.path.join(shared_tmp, "project")
    code = (
        "import os, sys\n"
        "folder, torch, victim = sys.argv[1], sys.argv[2], sys.argv[3]\n"
        "os.mkdir(folder, 0o755)\n"
        "open(os.path.join(folder, 'torch.py'), 'w').write(torch)\n"
        "if victim:\n"
        "    os.symlink(victim, os.path.join(folder, 'out.json.tmp'))\n"
    )
    planted = as_user(
        attacker,
        [SYSTEM_PY, "-c", code, folder, PLANTED_TORCH.format(mark=os.path.join(shared_tmp, "mark")), victim],
    )
    assert planted.wait(30) == 0
    return folder


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": ROOT}


def test_hook_cost_never_imports_a_torch_planted_in_the_working_directory(attacker, shared_tmp):
    folder = _attacker_folder(attacker, shared_tmp)
    code, out, err = run_bounded(
        DLWATCH_SCRIPT + ["probe", "hook-cost", "--rounds", "1", "--loaders", "in-process", "--timeout", "200"],
        400,
        cwd=folder,
        env=_env(),
    )
    mark = os.path.join(shared_tmp, "mark")
    assert not os.path.exists(mark), f"the planted torch.py ran: {open(mark).read()}"
    assert code == 0, err
    assert "in-process" in out


def test_hook_cost_json_never_writes_through_a_link_planted_beside_it(attacker, shared_tmp, tmp_path):
    victim = tmp_path / "victim"  # root's own file, as /root/.bashrc is
    victim.write_text("root's\n")
    folder = _attacker_folder(attacker, shared_tmp, str(victim))
    out_json = os.path.join(folder, "out.json")
    # A run that times out at once: the probe still writes what it has (partial) to --json.
    code, _out, err = run_bounded(
        DLWATCH_SCRIPT
        + ["probe", "hook-cost", "--rounds", "1", "--loaders", "in-process", "--timeout", "0.01", "--json", out_json],
        120,
        cwd=str(tmp_path),
        env=_env(),
    )
    assert victim.read_text() == "root's\n", "the probe wrote through the planted link"
    assert code == 1, err
    assert os.path.islink(os.path.join(folder, "out.json.tmp"))  # left alone
    assert not os.path.islink(out_json)
    with open(out_json, encoding="utf-8") as f:
        assert json.load(f)["partial"].startswith("a run failed")


def test_overhead_never_imports_a_planted_torch_nor_writes_json_through_a_planted_link(attacker, shared_tmp, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    folder = _attacker_folder(attacker, shared_tmp, str(victim))
    out_json = os.path.join(folder, "out.json")
    code, _out, err = run_bounded(
        DLWATCH_SCRIPT
        + ["probe", "overhead", "--workers", "1", "--pairs", "1", "--seconds", "1", "--warmup", "0"]
        + ["--no-hang", "--json", out_json],
        400,
        cwd=folder,
        env=_env(),
    )
    mark = os.path.join(shared_tmp, "mark")
    assert not os.path.exists(mark), f"the planted torch.py ran: {open(mark).read()}"
    assert victim.read_text() == "root's\n", "the probe wrote through the planted link"
    assert code == 0, err
    with open(out_json, encoding="utf-8") as f:
        assert json.load(f)["results"]


def test_bench_never_imports_a_planted_torch_nor_writes_csv_through_a_planted_link(attacker, shared_tmp, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    folder = _attacker_folder(attacker, shared_tmp, str(victim))
    out_csv = os.path.join(folder, "out.csv")
    # Once the flags are checked (the first run started), the attacker puts a link at the path.
    late_link = (
        "import os, sys, time\n"
        "end = time.monotonic() + 300\n"
        "while time.monotonic() < end:\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            cmd = open('/proc/%s/cmdline' % pid, 'rb').read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if b'bench.' + b'child' in cmd and int(pid) != os.getpid():\n"
        "            os.symlink(sys.argv[1], sys.argv[2])\n"
        "            sys.exit(0)\n"
        "    time.sleep(0.02)\n"
        "sys.exit(1)\n"
    )
    linker = as_user(attacker, [SYSTEM_PY, "-c", late_link, str(victim), out_csv])
    tiny = ["--samples", "240", "--sample-shape", "4", "--batch-size", "16", "--cpu-ms", "0", "--io-ms", "0"]
    code, _out, err = run_bounded(
        DLWATCH_SCRIPT
        + ["probe", "bench", "--num-workers", "0", "--pin-memory", "false", *tiny, "--repeats", "1", "--csv", out_csv],
        400,
        cwd=folder,
        env=_env(),
    )
    linker.kill()
    linked = linker.wait(30) == 0
    mark = os.path.join(shared_tmp, "mark")
    assert not os.path.exists(mark), f"the planted torch.py ran: {open(mark).read()}"
    assert victim.read_text() == "root's\n", "the probe wrote through the planted link"
    assert code == 0, err
    assert linked, "the attacker never saw the run start"
    assert not os.path.islink(out_csv)
    with open(out_csv, encoding="utf-8") as f:
        assert "num_workers" in f.readline()
