"""One report as a self-contained HTML page (``dlwatch show --html REPORT``): the summary, the
evidence, plots of the timeline and every stack, collapsible. No network access is needed to
read it: the plots are PNGs inside the page. The plots need matplotlib (the ``[html]`` or
``[probes]`` extra); without it the page says so and holds everything else.

Plots, against seconds since the first sample, with the stall window shaded: CPU use of each
process (% of one core), RSS and USS, open fds against RLIMIT_NOFILE, ``/dev/shm`` use (the
whole machine's, labelled so: the file system is shared by every process, not only the job's),
and, with the inside view, each iterator's batches and data wait. Above them, where the step time
goes over the timeline's last minute (``watchdog/report/step_time.py``): main's data wait
against the rest, the workers' cpu, runnable, io and idle, stacked to 100 %, with a table of the
same figures.
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import Dict, List, Optional, Tuple

from ..text import printable
from . import step_time
from .rendering import STACKS_HEADING, headline


def _esc(text: str) -> str:
    """HTML-escaped, with control characters from the job written as ``\\xNN``
    (:func:`watchdog.text.printable`)."""
    return html.escape(printable(text))


# The links the page may hold: http(s) URLs, and relative paths of plain and percent-encoded
# characters (no ':' and so no scheme: never ``javascript:`` or ``data:`` from a report's data).
_SAFE_HREF = re.compile(r"(?:https?://[^\x00-\x20\x7f-\x9f\"'<>\\]+|(?!//)[A-Za-z0-9._~/%+-]+)\Z")


def safe_href(href: Optional[str]) -> Optional[str]:
    """``href`` when a link may take it (:data:`_SAFE_HREF`), else ``None``."""
    return href if isinstance(href, str) and _SAFE_HREF.match(href) else None


_STYLE = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1100px;
color: #222; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; font-size: 12px; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
.plots img { max-width: 100%; border: 1px solid #ddd; margin: 0.3em 0; }
details { margin: 0.4em 0; } summary { cursor: pointer; font-weight: 600; }
.note { color: #8a6d3b; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 0.15em 0.6em; text-align: left; }
"""


def _series(
    doc: dict,
) -> Tuple[
    List[float],
    Dict[str, Dict[str, List[Tuple[float, float]]]],
    List[Tuple[float, float]],
    Dict[str, List[Tuple[float, float, float]]],
]:
    """From the timeline: times, per-process series (cpu %, rss, uss, fds, fd limit) keyed by
    ``role pid``, /dev/shm use, and per-iterator ``(t, batches, wait_s)``: ``wait_s`` is the
    time main spent in ``__next__`` so far, the wait in progress included (a stall shows as a
    rising line, not a flat one: the recorder adds a wait to its total only when the batch
    comes)."""
    timeline = doc.get("timeline") or []
    if not timeline:
        return [], {}, [], {}
    t0 = timeline[0]["t_mono"]
    times = [s["t_mono"] - t0 for s in timeline]
    procs: Dict[str, Dict[str, List[Tuple[float, float]]]] = {}
    last_cpu: Dict[int, Tuple[float, float]] = {}
    shm = []
    loaders: Dict[str, List[Tuple[float, float, float]]] = {}
    for t, s in zip(times, timeline):
        if s.get("shm_used_bytes") is not None:
            shm.append((t, s["shm_used_bytes"] / 2**20))
        for p in s.get("processes", []):
            key = f"{p['role']} {p['pid']}"
            series = procs.setdefault(key, {"cpu": [], "rss": [], "uss": [], "fds": [], "limit": []})
            prev = last_cpu.get(p["pid"])
            if prev is not None and t > prev[0]:
                series["cpu"].append((t, 100.0 * (p["cpu_s"] - prev[1]) / (t - prev[0])))
            last_cpu[p["pid"]] = (t, p["cpu_s"])
            series["rss"].append((t, p["rss_bytes"] / 2**20))
            if p.get("uss_bytes") is not None:
                series["uss"].append((t, p["uss_bytes"] / 2**20))
            if p.get("num_fds") is not None:
                series["fds"].append((t, p["num_fds"]))
            if p.get("rlimit_nofile_soft"):
                series["limit"].append((t, p["rlimit_nofile_soft"]))
        for entry in s.get("loaders", []):
            pid, iterator, _epoch, batches, wait_s = entry[:5]
            waiting_s = entry[5] if len(entry) > 5 and entry[5] is not None else 0.0
            loaders.setdefault(f"pid {pid} iterator {iterator}", []).append((t, batches, wait_s + waiting_s))
    return times, procs, shm, loaders


def _changes(points: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """The points where the value changed (a slow-cadence reading held between reads)."""
    out: List[Tuple[float, float]] = []
    for t, v in points:
        if not out or v != out[-1][1]:
            out.append((t, v))
    return out


def _stall_window(doc: dict, times: List[float]) -> Optional[Tuple[float, float]]:
    stall = doc.get("stall") or {}
    if not times or not stall.get("stall_s"):
        return None
    end = times[-1]
    return max(0.0, end - stall["stall_s"]), end


# Where each figure's axes sit, in figure fractions (left, bottom, width, height): the same in
# every figure, so that the panels' x axes line up on the page; the legend goes to their right.
AXES = (0.07, 0.17, 0.72, 0.72)
FIGSIZE = (12, 3.2)  # inches, at 90 dpi


def y_range(lines) -> Tuple[float, float]:
    """The y range of a figure of ``lines`` (``(label, [(t, value)], style)``, values >= 0):
    from 0 to a tenth above the highest value, ``(0, 1)`` when there is none or all are 0
    (matplotlib's own choice for a flat line is ±0.04 around it)."""
    top = max((v for _, points, _ in lines for _, v in points), default=0.0)
    return 0.0, (top * 1.1 if top > 0 else 1.0)


# The /dev/shm plot's title and line: statvfs of /dev/shm counts every process's files on the
# machine (or in the job's container), never only the job's, and says so.
SHM_TITLE = "/dev/shm, whole machine (every process's files, not only this job's)"
SHM_LABEL = "/dev/shm (whole machine)"


def plots(doc: dict) -> List[Tuple[str, bytes]]:
    """``(title, PNG bytes)`` for each plot of the report's timeline (none without samples).

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times, procs, shm, loaders = _series(doc)
    if not times:
        return []
    window = _stall_window(doc, times)
    out = []
    colors = {
        k: f"C{i % 10}" for i, k in enumerate(list(procs) + list(loaders) + [SHM_LABEL])
    }  # one colour per process, in every plot

    x_end = max(times[-1], 1.0)

    def figure(title: str, ylabel: str, lines):
        # Every figure has the same size, margins and x range, so that one instant is at the same
        # place in each (the legend goes in the right margin, never over the lines).
        fig = plt.figure(figsize=FIGSIZE, dpi=90)
        ax = fig.add_axes(AXES)
        for label, points, style in lines:
            if points:
                key = label.rsplit(" ", 1)[0] if label.endswith((" RSS", " USS", " limit")) else label
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    style,
                    label=label,
                    linewidth=1.2,
                    color=colors.get(key),
                )
        if window is not None:
            ax.axvspan(window[0], window[1], color="#d62728", alpha=0.12, label="stall")
        if not any(points for _, points, _ in lines):
            ax.text(0.5, 0.5, "no readings", transform=ax.transAxes, ha="center", va="center", color="#777")
        ax.set_xlim(0.0, x_end)
        ax.set_ylim(*y_range(lines))
        ax.set_title(title)
        ax.set_xlabel("seconds since the first sample")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        out.append((title, buf.getvalue()))

    figure("CPU", "% of one core", [(k, v["cpu"], "-") for k, v in procs.items()])
    # USS is read every memory_read_base_interval_s or less often: a point per read, not a line held between reads.
    figure(
        "Memory (USS: dots, read every memory_read_base_interval_s or less often)",
        "MiB",
        [(f"{k} RSS", v["rss"], "-") for k, v in procs.items()]
        + [(f"{k} USS", _changes(v["uss"]), "o") for k, v in procs.items()],
    )
    most = max((n for v in procs.values() for _, n in v["fds"]), default=0)
    limits = sorted({n for v in procs.values() for _, n in v["limit"]})
    if limits and limits[0] <= 10 * max(most, 1):  # a limit near the counts is drawn; a far one is named
        figure(
            "Open file descriptors",
            "fds",
            [(k, v["fds"], "-") for k, v in procs.items()]
            + [(f"{k} limit", v["limit"], ":") for k, v in procs.items() if v["limit"]],
        )
    else:
        limit = f" (RLIMIT_NOFILE {', '.join(str(int(x)) for x in limits)})" if limits else ""
        figure("Open file descriptors" + limit, "fds", [(k, v["fds"], "-") for k, v in procs.items()])
    figure(SHM_TITLE, "MiB used", [(SHM_LABEL, shm, "-")])
    if loaders:
        figure(
            "Batches delivered (inside view)",
            "batches",
            [(k, [(t, b) for t, b, _ in v], "-") for k, v in loaders.items()],
        )
        figure(
            "Data wait (inside view)",
            "s main waited in __next__",
            [(k, [(t, w) for t, _, w in v], "-") for k, v in loaders.items()],
        )
    return out


def _title(doc: dict) -> str:
    """The report text's first line (:func:`watchdog.report.rendering.headline`: proven or suspected, the
    cause's kind and certainty, the rank, the job's state), or a shorter one of what a report
    of another version holds."""
    try:
        return headline(doc)
    except (LookupError, TypeError, ValueError, AttributeError):
        first = (doc.get("diagnoses") or [{}])[0]
        pid = (doc.get("job") or {}).get("pid", "")
        return f"dlwatch: {doc.get('mode', '')}: {first.get('kind', '')} — job pid {pid}"


def render(
    doc: dict,
    text: str,
    verified: Optional[dict] = None,
    runs_href: Optional[str] = None,
    outcome: Optional[dict] = None,
) -> str:
    """The HTML page of a report: ``doc`` is its ``report.json``, ``text`` its ``report.txt``;
    its title and heading are the text's first line (:func:`_title`), followed by what became
    of a hang (``outcome``: ``outcome.json``'s ``summary`` and ``at``); ``verified`` what
    ``dlwatch verify`` concluded of its fix (``verify.json``), linked to its runs at
    ``runs_href`` (a path relative to the page) when given and :func:`safe_href`."""
    summary, _, stacks = text.partition("\n" + STACKS_HEADING)
    first = (doc.get("diagnoses") or [{}])[0]
    title = _title(doc)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f'<h1 id="title">{_esc(title)}</h1>',
    ]
    if outcome is not None:
        at = f" ({outcome['at']})" if outcome.get("at") else ""
        parts.append(f'<p id="outcome"><b>Outcome:</b> {_esc(str(outcome.get("summary", "")) + str(at))}</p>')
    elif doc.get("mode") == "hang":
        parts.append('<p id="outcome"><b>Outcome:</b> none recorded (the hang is open, or watching stopped first)</p>')
    parts.append(f'<p id="cause"><b>Cause:</b> {_esc(first.get("summary", ""))}</p>')
    if first.get("location"):
        parts.append(f"<p><b>Where:</b> <code>{_esc(first['location'])}</code></p>")
    parts.append(f"<p><b>Fix:</b> {_esc(first.get('remedy', ''))}</p>")
    if verified is not None:
        href = safe_href(runs_href)
        link = f' <a id="verify-runs" href="{_esc(href)}">the runs</a>' if href else ""
        parts.append(f'<p id="verify"><b>Verify:</b> {_esc(str(verified.get("verdict", "")))}.{link}</p>')
    note = f" ({doc['action_note']})" if doc.get("action_note") else ""
    parts.append(f"<p><b>Action:</b> {_esc(str(doc.get('action', '')) + note)}</p>")
    parts.append('<h2>Evidence</h2><ul id="evidence">')
    parts += [f"<li>{_esc(line)}</li>" for line in first.get("evidence", [])]
    parts.append("</ul>")
    parts += _step_time_section(doc)
    parts.append('<h2>Timeline</h2><div class="plots" id="plots">')
    try:
        images = plots(doc)
        if not images:
            parts.append('<p class="note">No samples in the timeline.</p>')
        for name, png in images:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<img alt="{_esc(name)}" src="data:image/png;base64,{data}">')
    except ImportError:
        parts.append('<p class="note">Plots need matplotlib: pip install ".[html]" in dlwatch\'s clone.</p>')
    parts.append("</div>")
    parts.append("<h2>Report</h2><details open><summary>report.txt (summary)</summary>")
    parts.append(f"<pre>{_esc(summary)}</pre></details>")
    if stacks.strip():
        parts.append('<h2>Stacks</h2><div id="stacks">')
        for block in _stack_blocks(stacks):
            head, _, body = block.partition("\n")
            # What a dump lost ("(no stack: …)", "(Python frames only: …)") shows while folded.
            first_line = body.strip().split("\n", 1)[0]
            lost = f" {first_line}" if first_line.startswith("(") else ""
            parts.append(f"<details><summary>{_esc(head.strip() + lost)}</summary><pre>{_esc(body)}</pre></details>")
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _step_time_section(doc: dict) -> List[str]:
    """The section "Where the step time goes" (:mod:`watchdog.report.step_time`): a table of
    each part's share and seconds, and the stacked bars when matplotlib is there; nothing when
    the timeline holds neither main's data wait nor a worker."""
    st = step_time.step_time(doc)
    if st is None:
        return []
    out = [
        '<h2>Where the step time goes</h2><div class="plots" id="step-time">',
        f"<p>Over the last {_esc(f'{st.window_s:.0f}')} s of the timeline, from the states and CPU time each "
        "sample saw (the run queue is not in the report: runnable is time seen running without a CPU).</p>",
        '<table id="step-time-figures"><tr><th>process</th><th>part</th><th>share</th><th>seconds</th>'
        "<th>what it is</th></tr>",
    ]
    rows = [("main", st.main)] if any(v for _, v in st.main) else []
    if st.n_workers:
        rows.append((f"workers ({st.n_workers}, summed)", st.workers))
    for who, parts in rows:
        seconds = dict(parts)
        for part, share in step_time.StepTime.shares(parts):
            out.append(
                f"<tr><td>{_esc(who)}</td><td>{_esc(part)}</td><td>{_esc(f'{100 * share:.0f} %')}</td>"
                f"<td>{_esc(f'{seconds[part]:.1f}')}</td><td>{_esc(step_time.MEANING[part])}</td></tr>"
            )
    out.append("</table>")
    try:
        data = base64.b64encode(step_time.plot(st)).decode("ascii")
        out.append(f'<img alt="{_esc("Where the step time goes")}" src="data:image/png;base64,{data}">')
    except ImportError:
        out.append('<p class="note">The plot needs matplotlib: pip install ".[html]" in dlwatch\'s clone.</p>')
    out.append("</div>")
    return out


def _stack_blocks(stacks: str) -> List[str]:
    """The stacks section split into one block per process (lines starting at two spaces)."""
    blocks: List[str] = []
    for line in stacks.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            blocks.append(line)
        elif blocks:
            blocks[-1] += "\n" + line
    return blocks
