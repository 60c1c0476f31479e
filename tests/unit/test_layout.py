"""The package's shape: dependencies point one way (collect -> detect -> diagnose -> report),
and no stage parses the sentences of another (records cross stages; only report.py renders
and re-reads its own text)."""

from __future__ import annotations

import ast
import os

from tests.unit.builders import ROOT

PACKAGE = os.path.join(ROOT, "watchdog")

# The stages in order: a module may import its own stage and those before it, never later ones.
STAGES = ("types", "collect", "detect", "diagnose", "report")

# What reading another stage's prose looked like: a proof's lines picked by their "pid N " head,
# a lost stack part split off its sentence, evidence lines sorted back by their "proof: " head.
PARSING_PROSE = ('startswith(f"pid ', 'startswith("pid ', '" lost:"', "' lost:'", '"proof: ")', "'proof: ')")


def _modules():
    for folder, _dirs, files in os.walk(PACKAGE):
        if "bootstrap" in folder:
            continue  # runs inside the job, imports nothing of the watchdog
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def _stage(path: str):
    rel = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
    head = rel.split("/")[0].removesuffix(".py")
    return head if head in STAGES else None


def _imported_stages(path: str):
    tree = ast.parse(open(path, encoding="utf-8").read())
    rel = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
    depth = rel.count("/")  # 1 inside a subpackage
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = (node.module or "").split(".")
            if node.level - 1 == depth and parts[0]:
                yield parts[0]
            elif node.level == depth + 1 and not parts[0]:
                yield from (a.name for a in node.names)
            elif node.level == 1 and depth == 1:
                yield rel.split("/")[0]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("watchdog."):
            yield node.module.split(".")[1]


def test_dependencies_point_one_way():
    wrong = []
    for path in _modules():
        stage = _stage(path)
        if stage is None:
            continue
        for imported in _imported_stages(path):
            if imported in STAGES and STAGES.index(imported) > STAGES.index(stage):
                wrong.append(f"{os.path.relpath(path, ROOT)} ({stage}) imports {imported}")
    assert not wrong, wrong


def test_no_stage_parses_another_stages_sentences():
    found = []
    for path in _modules():
        if os.path.basename(path) == "report.py":
            continue
        text = open(path, encoding="utf-8").read()
        found += [f"{os.path.relpath(path, ROOT)}: {p}" for p in PARSING_PROSE if p in text]
    assert not found, found
