"""The deployment recipes in docs/recipes: valid syntax, the settings each platform needs, and
dlwatch command lines that dlwatch's own parser accepts."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import yaml

from watchdog.cli import build_parser

RECIPES = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "recipes")


def _read(name):
    with open(os.path.join(RECIPES, name), encoding="utf-8") as f:
        return f.read()


def _dlwatch_args(text):
    """The arguments of each ``dlwatch …`` command in a recipe (up to ``--`` or a shell operator)."""
    out = []
    for m in re.finditer(r"\bexec dlwatch ([^\n\\]+)|\bdlwatch (run [^\n]+)", text):
        text_ = (
            (m.group(1) or m.group(2))
            .replace("\\", " ")
            .replace('"$pid"', "4242")
            .replace('"$DLWATCH_PORT"', "9400")
            .replace('"$((DLWATCH_PORT + SLURM_LOCALID))"', "9400")
        )  # the shell fills them in
        words = shlex.split(text_)
        out.append(words[: words.index("--")] if "--" in words else words)
    return out


def test_the_kubernetes_pod_shares_processes_allows_ptrace_and_sizes_dev_shm():
    pod = yaml.safe_load(_read("kubernetes.yaml"))
    spec = pod["spec"]
    assert pod["kind"] == "Pod" and spec["shareProcessNamespace"] is True
    containers = {c["name"]: c for c in spec["containers"]}
    sidecar, trainer = containers["dlwatch"], containers["trainer"]
    assert "SYS_PTRACE" in sidecar["securityContext"]["capabilities"]["add"]
    assert sidecar["ports"][0]["containerPort"] == 9400
    dshm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in trainer["volumeMounts"]
    (args,) = _dlwatch_args(sidecar["command"][-1])
    parsed = build_parser().parse_args(args)
    assert parsed.command == "attach" and parsed.metrics_port == 9400 and parsed.on_hang == "terminate"
    reports = next(v for v in spec["volumes"] if v["name"] == "reports")
    assert "persistentVolumeClaim" in reports  # reports outlive the pod
    assert "pip install dataloader-watchdog" not in _read("kubernetes.yaml")  # not on PyPI


def test_the_slurm_and_docker_scripts_are_valid_shell_with_valid_dlwatch_flags():
    for name, shell in (("slurm.sbatch", "bash"), ("docker.sh", "sh")):
        done = subprocess.run([shell, "-n", os.path.join(RECIPES, name)], capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stderr)
        commands = _dlwatch_args(_read(name))
        assert commands, name
        for args in commands:
            parsed = build_parser().parse_args(args)
            assert parsed.command == "run" and parsed.metrics_port == 9400
    assert "--shm-size" in _read("docker.sh") and "SYS_PTRACE" in _read("docker.sh")
    assert "--init" in _read("docker.sh") and '--user "$(id -u):$(id -g)"' in _read("docker.sh")
    assert "DLWATCH_PORT=$((9400 + SLURM_JOB_ID % 500))" in _read("slurm.sbatch")


def test_the_slurm_recipe_covers_srun_without_torchrun_one_dlwatch_per_task_on_a_port_of_its_own():
    text = _read("slurm.sbatch")
    commands = _dlwatch_args(text)
    assert len(commands) == 2, commands  # around torchrun, and around each srun task
    per_task = r'--metrics-port "\$\(\(DLWATCH_PORT \+ SLURM_LOCALID\)\)"'
    plain = re.search(per_task + r"[^\n]*--\s*\\\n\s*python train\.py", text)
    assert plain, "the srun branch runs `dlwatch run … -- python train.py` with a port per local task"
    assert 'LAUNCH:-torchrun}" = torchrun' in text and "sbatch --ntasks-per-node=8" in text
