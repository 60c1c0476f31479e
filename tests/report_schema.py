"""report.json's JSON Schema (``watchdog/report/schema/report.schema.json``, draft 2020-12), for the
tests: every report a test builds or reads is checked against it."""

from __future__ import annotations

import functools
import json
import os

import watchdog

SCHEMA_FILE = os.path.join(
    os.path.dirname(os.path.abspath(watchdog.__file__)), "report", "schema", "report.schema.json"
)


def schema() -> dict:
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=1)
def validator():
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)


def errors(doc: dict) -> list:
    """Every way ``doc`` departs from the schema, one line each (empty: it conforms)."""
    found = sorted(validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in found]


def check(doc: dict, where: str = "report.json") -> dict:
    """``doc``, after asserting that it conforms to the schema."""
    bad = errors(doc)
    assert not bad, f"{where} does not conform to {SCHEMA_FILE}:\n  " + "\n  ".join(bad[:20])
    return doc
