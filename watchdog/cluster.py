"""``dlwatch cluster``: a job across nodes, as Prometheus has it from every node's sidecar.

Each node's ``dlwatch run --metrics-port`` serves its ranks' series (:mod:`watchdog.metrics`);
Prometheus scrapes them all. This asks Prometheus's HTTP API for instant vectors
(``GET /api/v1/query``, https://prometheus.io/docs/prometheus/latest/querying/api/) and prints
one row per rank: node, local rank, seconds since progress, batches, data wait (seconds main
waited in ``__next__``), the first report's kind and folder, then which rank stalled first. The comparison uses
``dlwatch_last_progress_timestamp_seconds`` (each node's own clock at its last progress), not
the ages at scrape time, which differ by the scrapes' skew. A rank whose sidecar stopped
answering (``up == 0``) is listed as such from its last values (``last_over_time``), never
dropped.

Exit codes: 0 nothing stalled, 1 a rank stalled, 2 Prometheus cannot be reached or has no
``dlwatch_`` series (:class:`~watchdog.errors.ClusterError`).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

from tabulate import tabulate

from .argtypes import positive_float
from .collect.discovery import RUN_ID_VALUE
from .exits import Exit

# How far back a rank whose sidecar went down is still shown with its last values.
LOOKBACK = "1h"
QUERY_TIMEOUT_S = 10.0


class ClusterError(Exception):
    """Prometheus could not be asked, or knows no ``dlwatch_`` series (exit code 2)."""


@dataclass(frozen=True)
class RankRow:
    """One rank of the job across nodes, as Prometheus last had it. Times are Unix seconds."""

    node: str
    rank: str
    local_rank: str
    run_id: str
    instance: str
    up: bool
    last_progress: Optional[float]
    since_progress_s: Optional[float]
    batches: Optional[float]
    data_wait_s: Optional[float]
    stall_timeout_s: Optional[float] = None
    report_kind: str = ""
    report_mode: str = ""
    report_folder: str = ""


def _shown(url: str) -> str:
    """``url`` as it may be printed: without a password (``user:…@host``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:…@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def query(base_url: str, expr: str, timeout_s: float = QUERY_TIMEOUT_S) -> List[dict]:
    """The result of instant query ``expr`` (a vector: ``[{"metric": {...}, "value": [t, "v"]}]``).
    ``base_url`` is http(s), optionally with ``user:password@`` (sent as basic auth, never shown).

    Raises:
        ClusterError: not an http(s) URL, Prometheus cannot be reached, refused the query, or
            answered something that is not its API's instant vector.
    """
    shown = _shown(base_url)
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClusterError(f"--prometheus {shown}: not an http:// or https:// URL (e.g. http://prometheus:9090)")
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    url = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/") + "/api/v1/query?"
    request = urllib.request.Request(url + urllib.parse.urlencode({"query": expr}))
    if parts.username is not None:
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(16 << 20)
    except urllib.error.HTTPError as e:
        try:
            why = json.loads(e.read(1 << 16)).get("error") or e.reason
        except (ValueError, OSError, AttributeError):
            why = f"HTTP {e.code} {e.reason} (is this Prometheus?)"
        raise ClusterError(f"--prometheus {shown}: the query {expr!r} was refused: {why}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise ClusterError(f"--prometheus {shown}: cannot be reached: {reason}") from None
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(data, dict):
        raise ClusterError(f"--prometheus {shown}: answered, but not as Prometheus's HTTP API (/api/v1/query)")
    if data.get("resultType") != "vector":
        raise ClusterError(f"--prometheus {shown}: {expr!r} gave no instant vector")
    return [r for r in data.get("result") or [] if isinstance(r, dict)]


def _value(result: dict) -> Optional[float]:
    try:
        return float(result["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _key(metric: dict) -> Tuple[str, str, str]:
    return (str(metric.get("node", "")), str(metric.get("run_id", "")), str(metric.get("rank", "")))


def collect(base_url: str, run_id: Optional[str] = None, now: Optional[float] = None) -> List[RankRow]:
    """Every rank Prometheus has (of ``run_id`` when given), with its last values, ordered by
    node then rank.

    Raises:
        ClusterError: as :func:`query`; also when no ``dlwatch_`` series is found.
    """
    if run_id is not None and not RUN_ID_VALUE.match(run_id):  # taken into a query: no quote, no backslash
        raise ClusterError(f"--run-id {run_id!r}: not a run id (letters, digits, _ . : @ / + = -)")
    sel = f'{{run_id="{run_id}"}}' if run_id else ""
    last = query(base_url, f"last_over_time(dlwatch_last_progress_timestamp_seconds{sel}[{LOOKBACK}])")
    since = query(base_url, f"last_over_time(dlwatch_seconds_since_progress{sel}[{LOOKBACK}])")
    if not last and not since:
        raise ClusterError(
            f"--prometheus {_shown(base_url)}: no dlwatch_ series" + (f" of run {run_id}" if run_id else "")
        )
    # every epoch's batches: an iterator's own count (dlwatch_loader_batches) reads 0 at each
    # epoch's start, and a rank that moves would show none
    batches = query(
        base_url,
        f"sum by (node, run_id, rank) (last_over_time(dlwatch_loader_batches_delivered_total{sel}[{LOOKBACK}]))",
    )
    wait = query(
        base_url, f"sum by (node, run_id, rank) (last_over_time(dlwatch_loader_data_wait_seconds{sel}[{LOOKBACK}]))"
    )
    reports = query(base_url, f"last_over_time(dlwatch_report_info{sel}[{LOOKBACK}])")
    timeouts = query(base_url, f"last_over_time(dlwatch_stall_timeout_seconds{sel}[{LOOKBACK}])")
    starts = query(base_url, f"last_over_time(dlwatch_job_start_timestamp_seconds{sel}[{LOOKBACK}])")
    up = {str(r["metric"].get("instance", "")): _value(r) for r in query(base_url, "up")}
    now = time.time() if now is None else now
    rows: Dict[Tuple[str, str, str], dict] = {}
    for result in last + since:
        m = result.get("metric") or {}
        rows.setdefault(_key(m), {"local_rank": str(m.get("local_rank", "")), "instance": str(m.get("instance", ""))})
    for result in last:
        rows[_key(result["metric"])]["last"] = _value(result)
    for result in since:
        rows[_key(result["metric"])]["since"] = _value(result)
    by = {
        name: {_key(r["metric"]): _value(r) for r in results}
        for name, results in (("b", batches), ("w", wait), ("t", timeouts), ("s", starts))
    }
    firsts: Dict[Tuple[str, str, str], Tuple[str, str, str]] = {}
    for r in sorted(reports, key=lambda r: str(r["metric"].get("folder", ""))):
        m = r["metric"]
        key, folder = _key(m), str(m.get("folder", ""))
        if not _of_this_run(folder, by["s"].get(key)):
            continue  # an earlier run's report on this node: the series' labels are the same
        firsts.setdefault(key, (str(m.get("kind", "")), str(m.get("mode", "")), folder))
    out = []
    for key, row in rows.items():
        node, run, rank = key
        alive = up.get(row["instance"]) == 1.0
        last_at = row.get("last")
        if alive and last_at is not None:
            since_s: Optional[float] = now - last_at  # by the node's clock: a skew counts
        else:
            # A sidecar that no longer answers (its job ended, or its node is gone): its age as
            # last scraped, never one that grows after it: a job that finished is not stalled.
            since_s = row.get("since")
        kind, mode, folder = firsts.get(key, ("", "", ""))
        out.append(
            RankRow(
                node, rank, row["local_rank"], run, row["instance"], alive, last_at, since_s,
                by["b"].get(key), by["w"].get(key), by["t"].get(key), kind, mode, folder,
            )
        )  # fmt: skip
    return sorted(out, key=lambda r: (r.node, int(r.rank) if r.rank.isdigit() else -1, r.rank))


def _of_this_run(folder: str, started: Optional[float]) -> bool:
    """Whether a report folder (``<UTC time>-…``) was written after the run that ``started``
    (Unix seconds; ``None``: not known, kept)."""
    name = folder.rstrip("/").rsplit("/", 1)[-1]
    try:
        written = dt.datetime.strptime(name[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        return True
    return started is None or written >= started - 1.0


def stalled_after(row: RankRow, override_s: Optional[float]) -> float:
    """The age at which ``row`` counts as stalled: ``override_s`` when given, else its sidecar's
    own ``stall_timeout_s``, else 60 s."""
    return override_s if override_s is not None else row.stall_timeout_s or 60.0


def first_stalled(rows: List[RankRow], override_s: Optional[float] = None) -> Tuple[List[RankRow], Optional[str]]:
    """The ranks stalled (:func:`stalled_after`, by their last progress), and the line that
    names the first of them: the one whose progress stopped earliest, how long before any
    other stalled rank's, and its report (``None`` when nothing stalled)."""
    stalled = [r for r in rows if r.since_progress_s is not None and r.since_progress_s >= stalled_after(r, override_s)]
    if not stalled:
        return [], None
    dated = sorted((r for r in stalled if r.last_progress is not None), key=lambda r: r.last_progress or 0.0)
    first = dated[0] if dated else max(stalled, key=lambda r: r.since_progress_s or 0.0)
    who = f"rank {first.rank}" if first.rank else "the job"
    line = f"{who} on {first.node or first.instance} stalled first"
    if first.last_progress is not None:
        at = dt.datetime.fromtimestamp(first.last_progress, dt.timezone.utc).strftime("%H:%M:%SZ")
        others = [r.last_progress for r in stalled if r is not first and r.last_progress is not None]
        moving = len(rows) - len(stalled)
        lead = f", {min(others) - first.last_progress:.0f} s before any other rank" if others else ""
        lead += f"; {moving} other rank(s) still moving" if moving else ""
        line += f" ({at}{lead})"
    if first.report_folder:
        line += f"; its report: {first.node}:{first.report_folder}"
    elif not first.up:
        line += "; its sidecar no longer answers"
    return stalled, line


def render(rows: List[RankRow], stalled: List[RankRow], line: Optional[str]) -> str:
    """The table and the last line of ``dlwatch cluster``."""

    def fmt(v: Optional[float], spec: str) -> str:
        return "-" if v is None else format(v, spec)

    table = []
    for r in rows:
        state = "sidecar down" if not r.up else "stalled" if r in stalled else "moving"
        table.append(
            [
                r.node,
                r.rank or "-",
                r.local_rank or "-",
                state,
                fmt(r.since_progress_s, ".0f"),
                fmt(r.batches, ".0f"),
                fmt(r.data_wait_s, ".1f"),
                f"{r.report_mode} {r.report_kind}".strip() or "-",
                r.report_folder or "-",
            ]
        )
    headers = ["NODE", "RANK", "LOCAL", "STATE", "SINCE PROGRESS S", "BATCHES", "DATA WAIT S", "REPORT", "FOLDER"]
    text = tabulate(table, headers=headers, tablefmt="simple")
    return text + "\n" + (line or f"nothing stalled ({len(rows)} rank(s))")


def add_parser(sub) -> None:
    """The ``cluster`` subcommand."""
    p = sub.add_parser(
        "cluster",
        help="the job across nodes, from Prometheus: which rank on which node stalled first",
        description="Ask Prometheus (which scrapes every node's `dlwatch run --metrics-port`) for the job's ranks "
        "and say which one stalled first. Exit 0: nothing stalled; 1: a rank stalled; 2: Prometheus cannot be "
        "reached or has no dlwatch_ series.",
    )
    p.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus's base URL, e.g. http://prom:9090")
    p.add_argument("--run-id", metavar="ID", help="only this torchrun run (TORCHELASTIC_RUN_ID, the run_id label)")
    p.add_argument(
        "--stalled-after",
        type=positive_float,
        default=None,
        metavar="S",
        help="a rank counts as stalled once it has not moved for this long (default: its sidecar's stall_timeout_s)",
    )
    p.add_argument("--json", action="store_true", help="print the ranks and the verdict as JSON")


def cmd_cluster(args: argparse.Namespace) -> int:
    """``dlwatch cluster``; see the module docstring for its exit codes."""
    try:
        rows = collect(args.prometheus, args.run_id)
    except ClusterError as e:
        print(f"dlwatch: error: {e}", file=sys.stderr)
        return Exit.USAGE
    stalled, line = first_stalled(rows, args.stalled_after)
    if args.json:
        doc = {"ranks": [asdict(r) for r in rows], "stalled": [asdict(r) for r in stalled], "verdict": line}
        print(json.dumps(doc, indent=1))
    else:
        print(render(rows, stalled, line))
    return 1 if stalled else Exit.OK
