"""Text that reaches a terminal or a line of ours from what the job, a report or a server
controls: control characters written as escapes, on one line. A leaf: every stage may use it."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BREAKS = re.compile(r"[\n\r\t\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with every control character but tab and newline written as ``\\xNN`` (an
    escape sequence, OSC or CSI, can then neither move the cursor nor set the title)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def one_line(text: str) -> str:
    """``text`` on one line: every line break and tab written as its escape (``\\n``), then
    :func:`printable`; for what the job controls (its command line) inside a line of ours."""
    return printable(_BREAKS.sub(lambda m: repr(m.group())[1:-1], text))
