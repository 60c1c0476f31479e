"""The package's shape: every module has a room, dependencies point one way
(leaves → collect → detect → diagnose → report → watch → commands), no module borrows another's
private names, and no stage parses the sentences of another (records cross stages; only the
report renders and re-reads its own text)."""

from __future__ import annotations

import ast
import os
from typing import Iterator, List, Optional, Tuple

import pytest

from tests.unit.builders import ROOT

PACKAGE = os.path.join(ROOT, "watchdog")

# The rooms in order: a module may import its own room and those before it, never later ones.
STAGES = ("leaves", "collect", "detect", "diagnose", "report", "watch", "commands")
# Top-level modules and the room each belongs to; a package is a room of its own name.
TOP_LEVEL = {
    "__init__": "leaves",
    "types": "leaves",
    "config": "leaves",
    "argtypes": "leaves",
    "errors": "leaves",
    "exits": "leaves",
    "redact": "leaves",
    "frames": "leaves",
    "states": "leaves",
    "text": "leaves",
    "children": "leaves",
    "safefiles": "leaves",
    "cli": "commands",
    "__main__": "commands",
}

# What reading another stage's prose looked like: a proof's lines picked by their "pid N " head,
# a lost stack part split off its sentence, evidence lines sorted back by their "proof: " head.
PARSING_PROSE = ('startswith(f"pid ', 'startswith("pid ', '" lost:"', "' lost:'", '"proof: ")', "'proof: ')")


def _modules() -> Iterator[Tuple[str, str]]:
    """``(path relative to watchdog/, source)`` of every module but the bootstrap recorder (it
    runs inside the job and imports nothing of the watchdog)."""
    for folder, _dirs, files in os.walk(PACKAGE):
        if "bootstrap" in folder or "__pycache__" in folder:
            continue
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, PACKAGE).replace(os.sep, "/"), open(path, encoding="utf-8").read()


def _room(rel: str) -> Optional[str]:
    head = rel.split("/")[0].removesuffix(".py")
    if "/" in rel:
        return head if head in STAGES else None
    return TOP_LEVEL.get(head)


def _imports(rel: str, source: str) -> Iterator[Tuple[str, Tuple[str, ...]]]:
    """``(absolute module, names)`` for each ``from … import`` of the watchdog in ``source``."""
    package = ["watchdog"] + rel.removesuffix(".py").split("/")[:-1]
    if rel.endswith("__init__.py"):
        package = ["watchdog"] + rel.split("/")[:-1]
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        names = tuple(a.name for a in node.names)
        if node.level:
            base = package[: len(package) - (node.level - 1)]
            yield ".".join(base + ([node.module] if node.module else [])), names
        elif (node.module or "").split(".")[0] == "watchdog":
            yield node.module or "", names


def _room_of_module(module: str, name: str = "") -> Optional[str]:
    parts = module.split(".")[1:]
    if not parts:  # from watchdog import x
        parts = [name]
    if len(parts) == 1:
        return TOP_LEVEL.get(parts[0], parts[0] if parts[0] in STAGES else None)
    return parts[0] if parts[0] in STAGES else TOP_LEVEL.get(parts[0])


def upward_imports(rel: str, source: str) -> List[str]:
    """Imports in module ``rel`` of a later room than its own."""
    room = _room(rel)
    wrong = []
    for module, names in _imports(rel, source):
        rooms = {_room_of_module(module, n) for n in names} if module == "watchdog" else {_room_of_module(module)}
        for target in rooms - {None}:
            if room is not None and STAGES.index(target) > STAGES.index(room):  # type: ignore[arg-type]
                wrong.append(f"{rel} ({room}) imports {module} ({target})")
    return wrong


def borrowings(rel: str, source: str) -> List[str]:
    """Private names (``_x``) module ``rel`` takes from another module of the watchdog: imported
    by name, or read as an attribute of a module it imported."""
    found = [f"{rel} imports {n} from {m}" for m, names in _imports(rel, source) for n in names if _private(n)]
    imported = {
        a.asname or a.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported
            and _private(node.attr)
        ):
            found.append(f"{rel} reads {node.value.id}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_every_module_has_a_room():
    homeless = [rel for rel, _ in _modules() if _room(rel) is None]
    assert not homeless, f"give each a room in TOP_LEVEL or move it into a package: {homeless}"


def test_dependencies_point_one_way():
    wrong = [line for rel, source in _modules() for line in upward_imports(rel, source)]
    assert not wrong, wrong


def test_no_module_borrows_another_modules_private_names():
    found = [line for rel, source in _modules() for line in borrowings(rel, source)]
    assert not found, found


# Modules allowed past MAX_LINES: the /proc readers, the records that cross rooms (the bootstrap
# recorder is not among _modules: it runs inside the job).
LONG_ALLOWED = {"collect/procfs.py", "types.py"}
MAX_LINES = 800
# The watch loop's tick stays small: what it reads is the read plan's, what it says the others'.
WATCHER_MAX_LINES = 300


def test_no_module_is_over_800_lines_and_the_watcher_under_300():
    long = {rel: n for rel, src in _modules() if (n := src.count("\n")) > MAX_LINES and rel not in LONG_ALLOWED}
    assert not long, f"split these by responsibility: {long}"
    watcher = dict(_modules())["watch/watcher.py"].count("\n")
    assert watcher < WATCHER_MAX_LINES, watcher


@pytest.mark.parametrize(
    "rel, source",
    [
        ("collect/procfs.py", "from ..diagnose import hangs\n"),
        ("detect/progress.py", "from ..watch.watcher import Watcher\n"),
        ("report/writer.py", "from ..commands import verify\n"),
        ("types.py", "from . import detect\n"),
        ("diagnose/hangs/stuck.py", "from watchdog.report import document\n"),
    ],
)
def test_a_planted_upward_import_is_caught(rel, source):
    assert upward_imports(rel, source)


@pytest.mark.parametrize(
    "rel, source",
    [
        ("report/writer.py", "from ..collect.inside import _safe\n"),
        ("watch/watcher.py", "from ..collect import inside\nx = inside._records\n"),
    ],
)
def test_a_planted_borrowing_is_caught(rel, source):
    assert borrowings(rel, source)


def test_no_stage_parses_another_stages_sentences():
    found = []
    for rel, text in _modules():
        if rel.startswith("report/"):
            continue
        found += [f"{rel}: {p}" for p in PARSING_PROSE if p in text]
    assert not found, found


def test_every_package_is_shipped():
    """Each folder of watchdog/ (and probes/, shipped as watchdog.probes) with an ``__init__.py``
    is listed in setup.cfg's ``packages``: a missing one installs a dlwatch that cannot import
    it (the wheel leaves it out; an editable install hides that)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(cfg["options"]["packages"].split())
    found = set()
    for top, name in ((PACKAGE, "watchdog"), (os.path.join(ROOT, "probes"), "watchdog.probes")):
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if "__init__.py" in files:
                rel = os.path.relpath(folder, top)
                found.add(name if rel == "." else name + "." + rel.replace(os.sep, "."))
    assert found - listed == set(), f"add to setup.cfg [options] packages: {sorted(found - listed)}"
