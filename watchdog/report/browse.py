"""Reading reports back: ``dlwatch reports [DIR]`` lists them, ``dlwatch show REPORT`` prints
one again (``--html`` renders it as one self-contained HTML page, see :mod:`watchdog.report.html`).
Reads only what :mod:`watchdog.report.writer` wrote."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shlex
import stat
from typing import Any, Iterator, List, Optional, Tuple
from urllib.parse import quote

from tabulate import tabulate

from .. import frames
from ..errors import ReportNotFound
from ..text import printable
from .writer import OUTCOME_FILE, VERIFY_FILE

# The files of a report folder a user may name instead of the folder itself.
_REPORT_FILES = ("report.txt", "report.json", "report.html")
# The most bytes read of any file of a report folder (report.json, report.txt, outcome.json,
# verify.json): a report dlwatch writes is a few MiB; a planted 1 GiB file is refused unread.
MAX_REPORT_BYTES = 64 * 2**20
# The deepest nesting of arrays and objects a report's JSON may have (dlwatch writes about 8).
MAX_JSON_DEPTH = 64
# How a file of a report folder is opened: never through a link, never blocking on a FIFO or a
# device (O_NONBLOCK; open(2)), never inherited by a command dlwatch starts.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_capped(path: str, limit: int = MAX_REPORT_BYTES, dir_fd: Optional[int] = None) -> Tuple[bytes, os.stat_result]:
    """The bytes of ``path`` (relative to the folder ``dir_fd`` when given) and its ``fstat``:
    opened with ``O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC`` (open(2): a link, a FIFO or a device never
    makes dlwatch follow it or wait), checked with ``fstat`` to be a regular file of at most
    ``limit`` bytes, and read no further than that. Every file dlwatch reads from a report
    folder is read here (``dlwatch reports``, ``show``, ``verify``).

    Raises:
        OSError: it cannot be opened (``ENOENT``; ``ELOOP``: a link, said as "a link is
            refused") or is not a regular file of at most ``limit`` bytes; ``strerror`` says why
            in a few words.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link (a link is refused)", path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or folder)", path)
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"not a regular file of at most {limit >> 20} MiB ({st.st_size} bytes)", path)
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:  # it grew past the cap while read
            raise OSError(errno.EFBIG, f"not a regular file of at most {limit >> 20} MiB", path)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def parse_json(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``data`` as UTF-8 JSON (RFC 8259) of at most ``max_depth`` nested arrays and objects.

    Raises:
        ValueError: not UTF-8, not JSON, or nested deeper (json's own ``RecursionError`` on a
            deeper document is this error too).
    """
    try:
        doc = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    # The depth is walked without recursion: a document under the interpreter's limit (about
    # 1000) must not make the code that reads it recurse that deep either.
    todo: List[Tuple[Any, int]] = [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > max_depth:
            raise ValueError(f"nested deeper than {max_depth} levels")
        todo.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return doc


def one_line(value: object, limit: int = 300) -> str:
    """``str(value)`` as it may reach a terminal in one line or one table cell: every control
    character (an escape sequence, a newline, a tab) written as ``\\xNN``
    (:func:`watchdog.text.printable`), cut to ``limit`` characters."""
    text = printable(str(value)).replace("\n", "\\x0a").replace("\t", "\\x09")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def report_folder(path: str) -> str:
    """The report folder ``path`` names: itself, or the folder of one of its files
    (``report.txt``, the path dlwatch prints after a report; ``report.json``; ``report.html``)."""
    if os.path.basename(path.rstrip("/")) in _REPORT_FILES and not os.path.isdir(path):
        return os.path.dirname(path) or "."
    return path


@contextlib.contextmanager
def _opened(folder: str, what: str = "the report folder") -> Iterator[int]:
    """A descriptor of the report folder ``folder``, opened once (``O_DIRECTORY|O_NOFOLLOW``):
    every file of the report is read through it, so that the folder swapped for another (or a
    link) meanwhile changes nothing.

    Raises:
        ReportNotFound: no such folder, not a folder, or a symbolic link.
    """
    try:
        fd = os.open(folder, _FOLDER_FLAGS)
    except OSError as e:
        if e.errno == errno.ENOENT:
            why = "no such folder"
        elif e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(folder):
            why = f"a symbolic link: name {what} itself"
        elif e.errno == errno.ENOTDIR:
            why = "not a folder"
        else:
            why = e.strerror or str(e)
        raise ReportNotFound(folder, why) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _load(fd: int, folder: str) -> dict:
    try:
        data, _ = read_capped("report.json", dir_fd=fd)
    except FileNotFoundError:
        raise ReportNotFound(folder, "not a report folder (no report.json)") from None
    except OSError as e:
        raise ReportNotFound(folder, f"cannot read report.json: {e.strerror or e}") from None
    try:
        doc = parse_json(data)
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        raise ReportNotFound(folder, f"cannot read report.json: {one_line(e, 120)}") from None
    if not _well_formed(doc):
        raise ReportNotFound(folder, "report.json is not a dlwatch report (wrong shape)")
    return doc


def load(folder: str) -> dict:
    """The ``report.json`` document of a report folder, read as :func:`read_capped` and
    :func:`parse_json` say.

    Raises:
        ReportNotFound: no such folder, no ``report.json`` in it, a link, a FIFO or a file over
            :data:`MAX_REPORT_BYTES`, not valid JSON, nested deeper than :data:`MAX_JSON_DEPTH`.
    """
    with _opened(folder) as fd:
        return _load(fd, folder)


def _well_formed(doc) -> bool:
    """The fields the browsing code reads, with their types."""
    if not isinstance(doc, dict) or not isinstance(doc.get("job", {}), dict):
        return False
    diagnoses = doc.get("diagnoses")
    if not isinstance(diagnoses, list) or not diagnoses or not all(isinstance(d, dict) for d in diagnoses):
        return False
    first = diagnoses[0]
    texts = ("kind", "summary", "remedy", "location")
    return (
        all(isinstance(first.get(k), str) or first.get(k) is None for k in texts)
        and isinstance(first.get("evidence", []), list)
        and isinstance(doc.get("timeline", []), list)
    )


def folders(report_dir: str) -> List[str]:
    """Report folders under ``report_dir``, newest first (their names start with the UTC time):
    folders (never links, whatever they point to) holding an entry named ``report.json``, which
    may still turn out unreadable (:func:`load` says why); temporary folders of reports being
    written are left out.

    Raises:
        ReportNotFound: ``report_dir`` is not a readable folder.
    """
    try:
        names = os.listdir(report_dir)
    except OSError as e:
        raise ReportNotFound(report_dir, e.strerror or str(e)) from None
    found = []
    for n in names:
        if n.startswith("."):
            continue
        path = os.path.join(report_dir, n)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            os.lstat(os.path.join(path, "report.json"))  # lstat never opens it (a FIFO)
        except OSError:
            continue
        found.append(path)
    return sorted(found, key=os.path.basename, reverse=True)


def _side(fd: int, name: str, text_key: str) -> Optional[dict]:
    """A JSON object written beside a report (``name`` in the folder ``fd``) whose ``text_key``
    is a string, or ``None`` when there is none or it cannot be read (:func:`read_capped`)."""
    try:
        doc = parse_json(read_capped(name, dir_fd=fd)[0])
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get(text_key), str) else None


def _side_file(folder: str, name: str, text_key: str) -> Optional[dict]:
    try:
        with _opened(folder) as fd:
            return _side(fd, name, text_key)
    except ReportNotFound:
        return None


def outcome(folder: str) -> Optional[dict]:
    """What became of a hang report (``outcome.json``, written by the watcher when the hang
    resolved, the job was ended, or the job ended): ``outcome``, ``summary``, ``at``; ``None``
    when none was written (not a hang, or watching stopped first) or it cannot be read."""
    return _side_file(folder, OUTCOME_FILE, "summary")


def verified(folder: str) -> Optional[dict]:
    """What the last ``dlwatch verify`` of this report concluded (``verify.json``, written into
    the report's folder): ``holds``, ``verdict``, ``folder`` (its runs); ``None`` when it was
    never verified or the file cannot be read."""
    return _side_file(folder, VERIFY_FILE, "verdict")


# A throughput verify's ``throughput.state`` (verify.json; watchdog/commands/throughput_ab.py) -> the
# OUTCOME cell: only a measured loss says the change does not help.
_SPEED_STATES = {
    "slower": "the change slowed it",
    "noise": "no gain shown",
    "withheld": "withheld (machine busy)",
    "cannot": "fix not proven",
}


def _verified_short(doc: dict) -> str:
    if doc.get("holds") is True:
        return "fix holds"
    speed = doc.get("throughput")
    state = speed.get("state") if isinstance(speed, dict) else None
    if isinstance(state, str) and state in _SPEED_STATES:
        return _SPEED_STATES[state]
    return "fix not proven" if str(doc.get("verdict")).startswith("not proven") else "fix does not hold"


# What the OUTCOME column says of each outcome kind.
_OUTCOME_SHORT = {"resolved": "resolved", "terminated": "terminated", "job_ended": "job ended"}


def _number(value: object) -> Optional[float]:
    """``value`` when it is a finite number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if abs(float(value)) < float("inf") else None


def _result(doc: dict, became: Optional[dict], proof: Optional[dict]) -> str:
    """The OUTCOME column: the hang's outcome and what ``dlwatch verify`` concluded."""
    result = ""
    if became is not None:
        result = _OUTCOME_SHORT.get(str(became.get("outcome")), str(became.get("outcome")))
        after, code = _number(became.get("resolved_after_s")), became.get("exit_code")
        if after is not None:
            result += f" after {after:.0f} s"
        elif code is not None:
            result += f" (exit {code})"
    elif doc.get("mode") == "hang":
        result = "-"
    if proof is not None:
        result = "; ".join(x for x in (result if result != "-" else "", _verified_short(proof)) if x)
    return result


def row(folder: str, doc: dict, became: Optional[dict] = None, proof: Optional[dict] = None) -> List[str]:
    """One line of ``dlwatch reports``: time, node, job pid, rank, mode, first kind, where, action,
    and the hang's outcome (``resolved after 41 s``, ``terminated``, ``job ended (exit 1)``)
    with what ``dlwatch verify`` concluded of its fix (``fix holds``, ``fix not proven``), from
    ``became`` (``outcome.json``) and ``proof`` (``verify.json``). Every cell is one line of
    printable text (:func:`one_line`): a report folder's name and fields may be another user's.

    Raises:
        AttributeError, TypeError, ValueError: a field of the wrong type (a hand-edited report).
    """
    first = (doc.get("diagnoses") or [{}])[0]
    job = doc.get("job") or {}
    rank = (job.get("rank") or {}).get("RANK", "")
    where = first.get("location") or ""
    if where:
        file, _, line = where.rpartition(":")
        where = f"{frames.short_path(file)}:{line}"
    mode = doc.get("mode", "")
    if mode == "hang":
        mode += f" ({(doc.get('stall') or {}).get('certainty') or 'suspected'})"
    cells = [
        str(doc.get("detected_at") or "")[:19].replace("T", " "),
        job.get("node", ""),
        job.get("pid", ""),
        rank,
        mode,
        first.get("kind", ""),
        where,
        doc.get("action", ""),
        _result(doc, became, proof),
    ]
    return [one_line(c, 120) for c in cells] + [one_line(folder)]


def _listed(folder: str) -> List[str]:
    """The line of one folder: its report's, or its error in the WHERE column."""
    try:
        with _opened(folder) as fd:
            doc = _load(fd, folder)
            return row(folder, doc, _side(fd, OUTCOME_FILE, "summary"), _side(fd, VERIFY_FILE, "verdict"))
    except ReportNotFound as e:  # its message is "'FOLDER': why", and the FOLDER column names it
        why = str(e)[len(repr(folder)) + 2 :] if e.path == folder else str(e)
    except (AttributeError, TypeError, ValueError, LookupError, ArithmeticError) as e:  # a hand-edited report.json
        why = f"report.json cannot be read: {type(e).__name__}"
    return ["", "", "", "", "", "", one_line(why), "", "", one_line(folder)]


def listing(report_dir: str, limit: Optional[int] = None) -> Tuple[str, int]:
    """The table of ``dlwatch reports`` and how many reports it lists; a folder that cannot be
    read (a link, a FIFO, a file over the cap, JSON nested too deep, a hand-edited field) is
    one line with its error instead of being dropped.

    Raises:
        ReportNotFound: ``report_dir`` is not a readable folder.
    """
    rows = [_listed(folder) for folder in folders(report_dir)[:limit]]
    headers = ["TIME (UTC)", "NODE", "JOB", "RANK", "MODE", "KIND", "WHERE", "ACTION", "OUTCOME", "FOLDER"]
    return tabulate(rows, headers=headers, tablefmt="simple"), len(rows)


def _text(fd: int, folder: str, full: bool) -> str:
    from .rendering import short_summary

    _load(fd, folder)
    try:
        data, _ = read_capped("report.txt", dir_fd=fd)
    except OSError as e:
        raise ReportNotFound(folder, f"cannot read report.txt: {e.strerror or e}") from None
    body = printable(data.decode("utf-8", errors="replace"))
    if not full:
        body = (
            short_summary(body)
            + f"  more:   dlwatch show --full {one_line(shlex.quote(folder))} (evidence, processes, stacks)\n"
        )
    became, proof = _side(fd, OUTCOME_FILE, "summary"), _side(fd, VERIFY_FILE, "verdict")
    extra = ""
    if became is not None:  # after the headline: what became of it, and whether its fix was proven
        extra += f"  outcome: {one_line(became['summary'])} ({one_line(became.get('at', '?'), 40)})\n"
    if proof is not None:
        extra += f"  verify: {one_line(proof['verdict'])} (runs: {one_line(proof.get('folder', '?'))})\n"
    if extra:
        lines = body.split("\n")
        # the headline, with the lines it was wrapped onto (indented 4: the key lines are at 2)
        head = 1 + next((i for i, line in enumerate(lines[1:]) if not line.startswith("    ")), len(lines) - 1)
        body = "\n".join(lines[:head]) + "\n" + extra + "\n".join(lines[head:])
    return body


def text(folder: str, full: bool = False) -> str:
    """The report again: its short summary as stderr got it when the report was written
    (:func:`watchdog.report.rendering.short_summary`: the headline and its cause, where, fix, action and
    prove lines) and a line naming ``--full``; or, when ``full``, the whole ``report.txt``
    (evidence, processes, stacks). What became of a hang (``outcome.json``) and what ``dlwatch
    verify`` concluded (``verify.json``) follow the headline in both. Every control character
    but newline and tab is escaped (``report.txt`` may be another user's: an escape sequence
    must not reach the terminal).

    Raises:
        ReportNotFound: not a report folder, or one of its files cannot be read (a link, a
            FIFO, over :data:`MAX_REPORT_BYTES`).
    """
    with _opened(folder) as fd:
        return _text(fd, folder, full)


def runs_href(runs: object, folder: str) -> Optional[str]:
    """The link from a report's HTML page to the folder of its verify runs (``verify.json``'s
    ``folder``): a relative path, percent-encoded (RFC 3986; no scheme such as ``javascript:``
    can come of it), or ``None`` unless ``runs`` is an absolute path of printable characters."""
    if not isinstance(runs, str) or not os.path.isabs(runs) or printable(runs) != runs or "\n" in runs:
        return None
    return quote(os.path.relpath(runs, os.path.abspath(folder))) + "/"


def _regular_or_absent(dir_fd: int, name: str, shown: str) -> None:
    """Refuse to replace ``name`` (in ``dir_fd``) unless it is absent or a regular file."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise ReportNotFound(shown, f"cannot write there: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise ReportNotFound(shown, "--out exists and is not a regular file (a device, FIFO or link): not replaced")


def _write_in(dir_fd: int, name: str, page: str, shown: str) -> None:
    """Write ``page`` as ``name`` in the folder ``dir_fd``, atomically: a temporary file made
    there (``O_EXCL|O_NOFOLLOW``, 0600) and renamed over ``name`` through the same descriptor
    (rename(2) with ``src_dir_fd``/``dst_dir_fd``), never through a path.

    Raises:
        ReportNotFound: ``name`` is there and not a regular file, or the page cannot be written.
    """
    _regular_or_absent(dir_fd, name, shown)
    tmp = f".{name}.{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as e:
        raise ReportNotFound(shown, f"cannot write there: {e.strerror or e}") from None
    try:
        # a lone surrogate (a process name that is not UTF-8, in report.json) is written escaped
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(page)
            f.flush()
            os.fsync(f.fileno())
        _regular_or_absent(dir_fd, name, shown)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except (OSError, ReportNotFound) as e:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        if isinstance(e, ReportNotFound):
            raise
        raise ReportNotFound(shown, f"cannot write there: {e.strerror or e}") from None


def write_html(folder: str, out: Optional[str] = None) -> str:
    """Render the report at ``folder`` as one HTML page (:mod:`watchdog.report.html`), written
    atomically to ``out`` (default ``FOLDER/report.html``, mode 0600); returns its path.
    The report is read, and the page written, through descriptors of the folders opened once
    (``O_DIRECTORY|O_NOFOLLOW``): a folder swapped for a link while the plots render does not
    move where the page goes.

    Raises:
        ReportNotFound: not a report folder; ``out`` (or its folder) is a link, a device, a
            FIFO or a folder; the page cannot be written.
    """
    from . import html as html_mod

    with _opened(folder) as fd:
        doc = _load(fd, folder)
        if out is not None:
            if not out or out.endswith("/") or os.path.isdir(out):
                raise ReportNotFound(out, "--out must name a file to write, not a folder or nothing")
            out_dir, name = os.path.split(out)
            with _opened(out_dir or ".", "the page's folder") as out_fd:
                _regular_or_absent(out_fd, name, out)  # refused before the plots take their time
                page = _page(html_mod, fd, folder, doc)
                _write_in(out_fd, name, page, out)
            return out
        _regular_or_absent(fd, "report.html", os.path.join(folder, "report.html"))
        page = _page(html_mod, fd, folder, doc)
        _write_in(fd, "report.html", page, os.path.join(folder, "report.html"))
        return os.path.join(folder, "report.html")


def _page(html_mod, fd: int, folder: str, doc: dict) -> str:
    proof = _side(fd, VERIFY_FILE, "verdict")
    try:
        href = runs_href(proof.get("folder"), folder) if proof is not None else None
        return html_mod.render(doc, _text(fd, folder, full=True), proof, href, _side(fd, OUTCOME_FILE, "summary"))
    except (LookupError, TypeError, ValueError, AttributeError, ArithmeticError) as e:  # a hand-edited report.json
        raise ReportNotFound(folder, f"report.json cannot be rendered: {one_line(repr(e), 200)}") from None
