"""The job writes its records (``PID.json`` in the recorder's folder) and may write any JSON
there: an integer of hundreds of digits (JSON has no bound; Python reads it exactly) in a
timestamp (``ended.ns``, ``failed[].ns``) made the reader's ``ns / 1e9`` raise OverflowError at
every read, so the whole inside view was lost while the file stayed (the watcher logged
"internal error while reading the inside view"). InsideReader never raises: such a value is
taken as absent."""

from __future__ import annotations

import json
import os

from watchdog.collect import inside

HUGE = int("9" * 400)


def test_a_record_with_an_integer_too_large_for_a_float_is_read_without_raising(tmp_path):
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    pid = os.getpid()  # a live process of "the job": its record is read
    doc = {"pid": pid, "ended": {"ns": HUGE, "code": HUGE, "name": "x"}, "failed": [{"batch": 1, "ns": HUGE}]}
    (folder / f"{pid}.json").write_text(json.dumps(doc))
    view = inside.InsideReader(str(folder)).read()
    (end,) = [e for e in view.ends if e.pid == pid]
    assert end.code is None and end.name == "x"
