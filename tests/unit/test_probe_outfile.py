"""probes.outfile.write_text and probes.env.python: a probe's output never goes through a link,
and a probe's Python children never take modules from the working directory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from probes.env import child_env, python
from probes.outfile import write_text


def test_write_text_replaces_a_link_at_the_path_and_never_writes_its_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    out = tmp_path / "out.json"
    out.symlink_to(victim)
    write_text(str(out), "{}\n")
    assert victim.read_text() == "keep\n"
    assert not out.is_symlink() and out.read_text() == "{}\n"


def test_write_text_ignores_the_old_temporary_name_a_link_could_sit_at(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "out.json.tmp").symlink_to(victim)
    write_text(str(tmp_path / "out.json"), "x")
    assert victim.read_text() == "keep\n"
    assert sorted(os.listdir(tmp_path)) == ["out.json", "out.json.tmp", "victim"]


def test_write_text_refuses_a_folder_that_is_a_link(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError):
        write_text(str(tmp_path / "link" / "out.json"), "x")
    assert os.listdir(real) == []


def test_child_env_drops_relative_pythonpath_entries():
    env = child_env({"PYTHONPATH": os.pathsep.join(["", ".", "rel", "/abs"])})
    parts = env["PYTHONPATH"].split(os.pathsep)
    assert "/abs" in parts
    assert all(os.path.isabs(p) for p in parts)


@pytest.mark.parametrize("isolated", [True, False])
def test_a_python_child_never_imports_from_its_working_directory(tmp_path, isolated):
    (tmp_path / "planted_mod.py").write_text("X = 1\n")
    code = "import importlib.util, sys; print(importlib.util.find_spec('planted_mod') is None)"
    done = subprocess.run(
        python("-c", code, isolated=isolated), cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    if sys.version_info >= (3, 11):  # -P: the working directory is off sys.path
        assert done.stdout.strip() == "True"
