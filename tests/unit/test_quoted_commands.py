"""Every ``dlwatch …`` command that a diagnosis, a report or ``dlwatch status`` quotes to the
user (in single backticks) parses with dlwatch's own parser, as tests/unit/test_docs.py holds
the docs' code blocks to it: ``dlwatch status`` once told a user to run ``dlwatch attach
--inside``, a flag that does not exist. The texts are read from the source (every string
literal of the modules that write them, f-strings with each value as ``1``), and the
needs-inside-view line also as the verdict writes it."""

from __future__ import annotations

import ast
import dataclasses
import glob
import os
import re
import shlex
from typing import List, Tuple

import pytest

from tests.unit.builders import live_facts
from tests.unit.test_throughput import timeline
from watchdog.diagnose.throughput import Verdict, judge

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The modules whose strings reach a diagnosis, a report or dlwatch status's output.
SOURCES = (
    "watchdog/diagnose/**/*.py",
    "watchdog/detect/**/*.py",
    "watchdog/report/**/*.py",
    "watchdog/commands/status.py",
)
QUOTED = re.compile(r"(?<!`)`([^`\n]*\bdlwatch\b[^`\n]*)`(?!`)")


def _texts(path: str) -> List[Tuple[int, str]]:
    """``(line, text)`` of each string literal of ``path`` but docstrings (they are read by
    developers, in double backticks); an f-string's values are ``1``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            out.append(
                (node.lineno, "".join(str(v.value) if isinstance(v, ast.Constant) else "1" for v in node.values))
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out.append((node.lineno, node.value))
    return out


def commands(text: str) -> List[str]:
    """The ``dlwatch …`` commands quoted in ``text``: each backtick span that holds one, and the
    ``$(dlwatch …)`` inside one (``env $(dlwatch hook-env) python train.py``); an ellipsis ends
    a command (what follows is the user's)."""
    out = []
    for span in QUOTED.findall(text):
        out += re.findall(r"\$\((dlwatch [^)]*)\)", span)
        rest = re.sub(r"\$\([^)]*\)", "", span).strip()
        if rest.startswith("dlwatch "):
            out.append(re.split(r"…|\.\.\.", rest, maxsplit=1)[0].strip())
    return out


def _quoted_in_sources() -> List[Tuple[str, str]]:
    found = []
    for pattern in SOURCES:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            for line, text in _texts(path):
                found += [(f"{os.path.relpath(path, ROOT)}:{line}", c) for c in commands(text)]
    return found


def parses(command: str) -> None:
    """Parse ``command`` with dlwatch's parser (and a probe command's own parser, as
    tests/unit/test_probe_cli.py does); raises AssertionError naming it when it does not."""
    from watchdog.cli import build_parser

    words = shlex.split(command)
    assert words[0] == "dlwatch", command
    try:
        args = build_parser().parse_args(words[1:])
        if args.command == "probe":
            from probes.bench import commands as probe_commands

            name = args.probe_args[0]
            if name in probe_commands.COMMANDS:  # the bench commands: their own parser
                probe_commands.build_parser(name).parse_args(args.probe_args[1:])
    except SystemExit as e:
        raise AssertionError(f"{command!r} does not parse") from e


def test_the_scan_finds_the_commands_the_texts_quote():
    found = _quoted_in_sources()
    assert len(found) >= 5, found
    assert any(c.startswith("dlwatch attach --pid") for _, c in found), found
    assert commands("start it with `env $(dlwatch hook-env) …` and `dlwatch attach --inside`") == [
        "dlwatch hook-env",
        "dlwatch attach --inside",
    ]


@pytest.mark.parametrize("where,command", _quoted_in_sources())
def test_every_dlwatch_command_a_diagnosis_or_status_quotes_parses(where, command):
    try:
        parses(command)
    except AssertionError as e:
        raise AssertionError(f"{where}: {e}") from None


def test_the_needs_inside_view_line_names_commands_that_run():
    # the line dlwatch status prints for a job without the recorder: it said `dlwatch attach --inside`
    tl = [dataclasses.replace(s, loaders=()) for s in timeline(0.9, cpu_share=0.95, state="R", wchan="0")]
    j = judge(live_facts(tl, host_cpus=2, inside=None))
    assert j.verdict == Verdict.NEEDS_INSIDE_VIEW
    quoted = commands(j.summary)
    assert "dlwatch hook-env" in quoted and any(c.startswith("dlwatch attach --pid ") for c in quoted), j.summary
    for c in quoted:
        parses(c)
    assert "env $(dlwatch hook-env) python train.py" in j.summary
