"""The report writer takes text the job controls: a process name (``/proc/PID/stat``'s comm,
any bytes but NUL, decoded as psutil does with undecodable bytes kept as surrogates,
procfs.parse_proc_stat) reaches report.txt and py-spy's raw files. A name that is not UTF-8
must not make the report unwritable (before: UnicodeEncodeError in _write_file, the report
lost and on_hang's action never taken)."""

from __future__ import annotations

import json
import os

from watchdog.collect import procfs
from watchdog.report import writer
from watchdog.types import Report


def test_a_process_name_that_is_not_utf8_is_written_escaped(tmp_path):
    st = procfs.parse_proc_stat(b"42 (bad\xff\xfe) S 1 42 42 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0")
    assert "\udcff" in st.comm  # the reader keeps the bytes as surrogates
    text = f"dlwatch: job hung\n  process {st.comm}\n"
    rep = Report(
        "20260101T000000Z-1", {"name": st.comm}, text, (("py-spy-42.json", json.dumps(st.comm)), ("x.txt", st.comm))
    )
    path = writer.write(rep, str(tmp_path / "r"))
    with open(os.path.join(path, "report.txt"), encoding="utf-8") as f:
        shown = f.read()
    assert "bad\\udcff\\udcfe" in shown
    with open(os.path.join(path, "report.json"), encoding="utf-8") as f:
        assert json.load(f)["name"] == st.comm
    with open(os.path.join(path, "x.txt"), encoding="utf-8") as f:
        assert f.read() == "bad\\udcff\\udcfe"
