"""Reading reports back: ``dlwatch reports [DIR]`` lists them, ``dlwatch show REPORT`` prints
one again (``--html`` renders it as one self-contained HTML page, see :mod:`watchdog.html`).
Reads only what :mod:`watchdog.writer` wrote."""

from __future__ import annotations

import json
import os
import stat
from typing import List, Optional, Tuple

from tabulate import tabulate

from . import frames
from .errors import ReportNotFound
from .writer import OUTCOME_FILE, VERIFY_FILE

# The files of a report folder a user may name instead of the folder itself.
_REPORT_FILES = ("report.txt", "report.json", "report.html")


def report_folder(path: str) -> str:
    """The report folder ``path`` names: itself, or the folder of one of its files
    (``report.txt``, the path dlwatch prints after a report; ``report.json``; ``report.html``)."""
    if os.path.basename(path.rstrip("/")) in _REPORT_FILES and not os.path.isdir(path):
        return os.path.dirname(path) or "."
    return path


def load(folder: str) -> dict:
    """The ``report.json`` document of a report folder.

    Raises:
        ReportNotFound: no such folder, no ``report.json`` in it, or not valid JSON.
    """
    path = os.path.join(folder, "report.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        why = "not a report folder (no report.json)" if os.path.isdir(folder) else "no such folder"
        raise ReportNotFound(folder, why) from None
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise ReportNotFound(folder, f"cannot read report.json: {getattr(e, 'strerror', None) or e}") from None
    if not _well_formed(doc):
        raise ReportNotFound(folder, "report.json is not a dlwatch report (wrong shape)")
    return doc


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
    """Report folders under ``report_dir``, newest first (their names start with the UTC time);
    temporary folders of reports being written are left out.

    Raises:
        ReportNotFound: ``report_dir`` is not a readable folder.
    """
    try:
        names = os.listdir(report_dir)
    except OSError as e:
        raise ReportNotFound(report_dir, e.strerror or str(e)) from None
    found = [
        os.path.join(report_dir, n)
        for n in names
        if not n.startswith(".") and os.path.isfile(os.path.join(report_dir, n, "report.json"))
    ]
    return sorted(found, key=os.path.basename, reverse=True)


def _side_file(folder: str, name: str, text_key: str) -> Optional[dict]:
    """A JSON object written beside a report (``name`` in ``folder``) whose ``text_key`` is a
    string, or ``None`` when there is none or it cannot be read."""
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get(text_key), str) else None


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


def _verified_short(doc: dict) -> str:
    if doc.get("holds") is True:
        return "fix holds"
    return "fix not proven" if str(doc.get("verdict")).startswith("not proven") else "fix does not hold"


# What the OUTCOME column says of each outcome kind.
_OUTCOME_SHORT = {"resolved": "resolved", "terminated": "terminated", "job_ended": "job ended"}


def row(folder: str, doc: dict) -> List[str]:
    """One line of ``dlwatch reports``: time, node, job pid, rank, mode, first kind, where, action,
    and the hang's outcome (``resolved after 41 s``, ``terminated``, ``job ended (exit 1)``)
    with what ``dlwatch verify`` concluded of its fix (``fix holds``, ``fix not proven``)."""
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
    became = outcome(folder)
    result = ""
    if became is not None:
        result = _OUTCOME_SHORT.get(str(became.get("outcome")), str(became.get("outcome")))
        if became.get("resolved_after_s") is not None:
            result += f" after {float(became['resolved_after_s']):.0f} s"
        elif became.get("exit_code") is not None:
            result += f" (exit {became['exit_code']})"
    elif doc.get("mode") == "hang":
        result = "-"
    proof = verified(folder)
    if proof is not None:
        result = "; ".join(x for x in (result if result != "-" else "", _verified_short(proof)) if x)
    return [
        str(doc.get("detected_at") or "")[:19].replace("T", " "),
        str(job.get("node", "")),
        str(job.get("pid", "")),
        str(rank),
        mode,
        first.get("kind", ""),
        where,
        doc.get("action", ""),
        result,
        folder,
    ]


def listing(report_dir: str, limit: Optional[int] = None) -> Tuple[str, int]:
    """The table of ``dlwatch reports`` and how many reports it lists; unreadable folders are
    listed with their error instead of dropped.

    Raises:
        ReportNotFound: ``report_dir`` is not a readable folder.
    """
    rows = []
    for folder in folders(report_dir)[:limit]:
        try:
            rows.append(row(folder, load(folder)))
        except ReportNotFound as e:
            rows.append(["", "", "", "", "", "", str(e), "", "", folder])
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as e:  # a hand-edited report.json
            rows.append(["", "", "", "", "", "", f"report.json cannot be read: {type(e).__name__}", "", "", folder])
    headers = ["TIME (UTC)", "NODE", "JOB", "RANK", "MODE", "KIND", "WHERE", "ACTION", "OUTCOME", "FOLDER"]
    return tabulate(rows, headers=headers, tablefmt="simple"), len(rows)


def text(folder: str, full: bool = False) -> str:
    """The report's text again: its summary (``report.txt`` without the stacks), or all of it.

    Raises:
        ReportNotFound: not a report folder.
    """
    from .report import summary_text

    load(folder)
    try:
        with open(os.path.join(folder, "report.txt"), encoding="utf-8", errors="replace") as f:
            body = f.read()
    except OSError as e:
        raise ReportNotFound(folder, f"cannot read report.txt: {e.strerror}") from None
    body = body if full else summary_text(body)
    became, proof = outcome(folder), verified(folder)
    extra = ""
    if became is not None:  # after the headline: what became of it, and whether its fix was proven
        extra += f"  outcome: {became['summary']} ({became.get('at', '?')})\n"
    if proof is not None:
        extra += f"  verify: {proof['verdict']} (runs: {proof.get('folder', '?')})\n"
    if extra:
        head, _, rest = body.partition("\n")
        body = f"{head}\n{extra}{rest}"
    return body


def write_html(folder: str, out: Optional[str] = None) -> str:
    """Render the report at ``folder`` as one HTML page (:mod:`watchdog.html`), written
    atomically to ``out`` (default ``FOLDER/report.html``, mode 0600); returns its path.

    Raises:
        ReportNotFound: not a report folder.
        OSError: the page cannot be written.
    """
    import tempfile

    from . import html as html_mod

    doc = load(folder)
    try:
        proof = verified(folder)
        runs = proof.get("folder") if proof is not None else None
        href = os.path.relpath(str(runs), folder) + "/" if isinstance(runs, str) and runs else None
        page = html_mod.render(doc, text(folder, full=True), proof, href)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a hand-edited report.json
        raise ReportNotFound(folder, f"report.json cannot be rendered: {e!r}") from None
    out = os.path.join(folder, "report.html") if out is None else out
    if not out or os.path.isdir(out):
        raise ReportNotFound(out, "--out must name a file to write, not a folder or nothing")
    try:  # the page replaces a regular file only, never a device (/dev/null), a FIFO or a link
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise ReportNotFound(out, f"cannot write there: {e.strerror or e}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ReportNotFound(out, "--out exists and is not a regular file (a device, FIFO or link): not replaced")
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out)), prefix=".report.html.")
    except OSError as e:
        raise ReportNotFound(out, f"cannot write there: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise ReportNotFound(out, f"cannot write there: {e.strerror or e}") from None
    return out
