"""The recipes' commands (docs/recipes), run as far as this machine allows: the Kubernetes
sidecar's ``pgrep`` line finds the trainer and never its own shell, and a metrics port that
another process holds stops ``dlwatch run`` before the job starts, with one line naming it."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess

import pytest
import yaml

from tests.real.helpers import DLWATCH, PY, ROOT, kill_tree, run_bounded, start, wait_for

RECIPES = os.path.join(ROOT, "docs", "recipes")


@pytest.mark.skipif(shutil.which("pgrep") is None, reason="needs pgrep (procps)")
def test_the_kubernetes_sidecars_pgrep_line_finds_the_trainer_not_its_own_shell(tmp_path):
    pod = yaml.safe_load(open(os.path.join(RECIPES, "kubernetes.yaml"), encoding="utf-8"))
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "dlwatch")
    script = sidecar["command"][-1]
    wait_line = next(line for line in script.splitlines() if "pgrep" in line)
    # The sidecar's shell as the pod runs it, printing the pid it would attach to.
    shell_script = wait_line + '\necho "found $pid"\n'
    (tmp_path / "train.py").write_text("import time\ntime.sleep(60)\n")
    shell = start(["sh", "-c", shell_script], cwd=str(tmp_path))
    trainer = None
    try:
        wait_for(lambda: shell.poll() is None, 5, "the sidecar's shell")
        trainer = start([PY, "train.py"], cwd=str(tmp_path))  # a path to python, as a venv's is
        out, _ = shell.communicate(timeout=30)
        assert re.fullmatch(r"found (\d+)\n", out), out
        assert int(out.split()[1]) == trainer.pid, (out, trainer.pid, shell.pid)
    finally:
        kill_tree(shell)
        if trainer is not None:
            kill_tree(trainer)


def test_a_metrics_port_already_taken_stops_dlwatch_run_before_the_job_starts(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    marker = tmp_path / "started"
    try:
        code, _, err = run_bounded(
            DLWATCH
            + ["run", "--report-dir", str(tmp_path), "--metrics-port", str(port), "--"]
            + [PY, "-c", f"open({str(marker)!r}, 'w')"],
            timeout_s=60,
        )
    finally:
        taken.close()
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0] and "--metrics-port" in lines[0]
    assert not marker.exists()  # the job never started: nothing half-watched


def test_the_slurm_port_is_taken_from_the_job_id():
    text = open(os.path.join(RECIPES, "slurm.sbatch"), encoding="utf-8").read()
    line = next(x for x in text.splitlines() if x.startswith("export DLWATCH_PORT="))
    out = subprocess.run(
        ["bash", "-c", f"SLURM_JOB_ID=123456; {line}; echo $DLWATCH_PORT"], capture_output=True, text=True
    ).stdout
    assert out.strip() == str(9400 + 123456 % 500)


def test_the_slurm_recipes_srun_task_is_watched_as_the_rank_slurm_numbered(tmp_path):
    """The recipe's branch without torchrun, run as srun runs it on a node: one task's shell,
    with the variables srun sets for task 1 of 2. Its dlwatch names the rank from SLURM_PROCID
    and serves it on DLWATCH_PORT + SLURM_LOCALID."""
    import urllib.request

    text = open(os.path.join(RECIPES, "slurm.sbatch"), encoding="utf-8").read()
    branch = text[text.index("\nelse\n") :]
    body = branch.split("bash -c '", 1)[1].split("\n  '\n", 1)[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, line in (("dlwatch", f'exec {PY} -m watchdog "$@"'), ("python", f'exec {PY} "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "train.py").write_text(
        "import os, sys, time, torch\nfrom torch.utils.data import DataLoader\n"
        "deadline = time.monotonic() + 90\n"
        "while not os.path.exists('done') and time.monotonic() < deadline:\n"
        "    for _ in DataLoader(range(40), batch_size=2, num_workers=1):\n"
        "        time.sleep(0.05)\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_")) and k != "RANK"}
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        PYTHONPATH=ROOT,
        REPORTS=str(tmp_path / "reports"),
        DLWATCH_PORT=str(port - 1),
        SLURM_JOB_ID="4242",
        SLURM_STEP_ID="0",
        SLURM_PROCID="1",
        SLURM_LOCALID="1",
        SLURM_NODEID="0",
        SLURM_NTASKS="2",
        SLURM_STEP_NUM_TASKS="2",
    )
    task = start(["bash", "-c", body], env=env, cwd=str(tmp_path))
    try:

        def ranks():
            from prometheus_client.parser import text_string_to_metric_families

            try:
                got = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                return None
            return {
                (s.labels["rank"], s.labels["local_rank"])
                for f in text_string_to_metric_families(got)
                for s in f.samples
                if s.name == "dlwatch_seconds_since_progress"
            }

        def ranked():
            seen = ranks()
            return seen if seen and ("1", "1") in seen else None

        assert wait_for(ranked, 120, "the task's metrics with its rank") == {("1", "1")}
        (tmp_path / "done").write_text("")
        _out, err = task.communicate(timeout=120)
        assert task.returncode == 0, err[-3000:]
        assert "watching rank 1 of 2" in err and "SLURM_PROCID" in err, err[-3000:]
    finally:
        kill_tree(task)
