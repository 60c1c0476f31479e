"""The judgement of ``dlwatch verify``'s runs, pure (no I/O): how each run went
(:class:`RunResult`; :func:`outcome_of`, :func:`certainty_of` and :func:`fix_applied` read it
from the run's summary and report documents), the one-sided exact tests of "the fixed runs fail
less often than the control" (:func:`fisher_one_sided`, R. A. Fisher 1925;
:func:`boschloo_one_sided`, R. D. Boschloo 1970; scipy's ``fisher_exact`` and
``boschloo_exact`` compute the same), the runs a flaky control would need
(:func:`runs_needed`), the verdict and its one line (:func:`verdict`), the code change that
makes the fix permanent (:func:`change_of`), the fix's cost (:func:`cost_line`) and the runs'
table (:func:`table`).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from tabulate import tabulate

from ..types import Fix
from .verify_plan import ALPHA, CONTROL, DEFAULT_RUNS, FIXED, MAX_RUNS, OUTPUT_FILE, Origin


@dataclass(frozen=True)
class RunResult:
    """One verify run: ``variant`` (``unchanged``/``fixed``), its ``index`` (from 1), how it
    went (``outcome``: ``hung``, ``crashed``, ``passed`` — reached its bound —, ``ended`` —
    ended by itself with exit code 0 —, ``timed out`` — ended at ``--max-run-s`` before its
    bound —, or ``failed`` — no summary came back), the first
    report's ``kind``, the job's ``exit_code``, the figures of its summary, whether the fix
    was seen applied (``applied``: the recorder saw the loader settings changed; ``None``
    when there is nothing to see), its report folders, and, for a run that failed with no
    report, the last line of its output (``error``). ``certainty`` is the hang report's
    (``stall.certainty`` in ``report.json``: ``proven`` or ``suspected``; ``""`` for a run that
    did not hang, or whose hang report says neither)."""

    @property
    def before_first_batch(self) -> bool:
        """The run failed before main's loaders delivered a batch, with no report of dlwatch's
        (its kind is only an exit code): the job failed by itself, before the loader."""
        return self.failed and not self.batches and (not self.kind or self.kind.startswith("exit code"))

    variant: str
    index: int
    outcome: str
    kind: str
    exit_code: Optional[int]
    batches: Optional[int]
    samples_per_s: Optional[float]
    first_batch_s: Optional[float]
    elapsed_s: Optional[float]
    applied: Optional[bool]
    reports: Tuple[str, ...]
    error: str = ""  # a run that failed with no report: the last line of its output (redacted)
    # The throughput path (watchdog.commands.throughput_ab): (seconds, batches) at each sample
    # whose count grew, and other processes' CPUs in use on average during the run, of host_cpus.
    progress: Tuple[Tuple[float, int], ...] = ()
    others_cpus: Optional[float] = None
    host_cpus: Optional[int] = None
    certainty: str = ""

    @property
    def failed(self) -> bool:
        """The run hung or crashed (or gave no summary). A run ended at ``--max-run-s``
        (``timed out``) neither failed nor passed."""
        return self.outcome in ("hung", "crashed", "failed")


def outcome_of(summary: Optional[dict], docs: List[dict]) -> Tuple[str, str]:
    """``(outcome, first report's kind)`` of a run from its summary and report documents."""
    kinds = [(d.get("mode"), d["diagnoses"][0]["kind"]) for d in docs if d.get("diagnoses")]
    hang = next((k for m, k in kinds if m == "hang"), "")
    crash = next((k for m, k in kinds if m == "crash"), "")
    if summary is None:
        return "failed", hang or crash
    if hang or summary.get("hung"):
        return "hung", hang or str(summary.get("hung"))
    if summary.get("stopped") in ("batches", "seconds"):
        return "passed", ""
    if summary.get("exit_code") == 0:
        return "ended", ""
    return "crashed", crash or f"exit code {summary.get('exit_code')}"


def certainty_of(docs: List[dict]) -> str:
    """The first hang report's certainty (``stall.certainty``: ``proven`` or ``suspected``), or
    ``""`` when no hang report says one."""
    for d in docs:
        stall = d.get("stall") if d.get("mode") == "hang" else None
        value = stall.get("certainty") if isinstance(stall, dict) else None
        if value in ("proven", "suspected"):
            return value
    return ""


def fix_applied(fix: Fix, variant: str, summary: Optional[dict]) -> Optional[bool]:
    """Whether the recorder saw the fix's loader settings and workers' thread count
    (``worker_threads``: the loader handed its workers the fix's ``worker_init_fn``);
    ``None``: nothing to check."""
    if variant != FIXED or not (fix.loader or fix.worker_threads is not None) or summary is None:
        return None
    seen = summary.get("loader_settings") or {}
    if not seen:
        return False
    if fix.worker_threads is not None and seen.get("worker_threads") != fix.worker_threads:
        return False
    # Without workers the recorder notes no start method, and prefetching does not apply.
    moot = ("multiprocessing_context", "prefetch_factor", "persistent_workers") if seen.get("num_workers") == 0 else ()
    return all(seen.get(k) == v or str(seen.get(k)) == str(v) for k, v in fix.loader if k not in moot)


def inconclusive(r: RunResult, origin: Origin) -> bool:
    """Whether run ``r`` ended in a *suspected* hang whose first diagnosis is not the report's
    kind (``unknown``, most often: a stall nothing explains, such as workers still starting on
    a loaded machine): no evidence that the run fails as the original did, nor that it passes
    (NOTE in docs/verify.md, "Verdict"). A proven hang, a crash, or a hang of the report's own
    kind is a failure whatever its certainty."""
    return r.outcome == "hung" and r.certainty == "suspected" and r.kind != origin.kind


def fisher_one_sided(control_failed: int, control_runs: int, fixed_failed: int, fixed_runs: int) -> float:
    """The one-sided Fisher exact p-value that the fixed runs fail less often than the
    control: the hypergeometric probability of ``fixed_failed`` or fewer failures among
    ``fixed_runs`` when the runs' failures (``control_failed + fixed_failed``) fall at random
    (R. A. Fisher, *Statistical Methods for Research Workers*, 1925, §21.02; scipy's
    ``fisher_exact(..., alternative="less")`` computes the same)."""
    total, failures = control_runs + fixed_runs, control_failed + fixed_failed
    denominator = math.comb(total, fixed_runs)
    return sum(
        math.comb(failures, k) * math.comb(total - failures, fixed_runs - k) for k in range(0, fixed_failed + 1)
    ) / float(denominator)


def boschloo_one_sided(control_failed: int, control_runs: int, fixed_failed: int, fixed_runs: int) -> float:
    """Boschloo's exact unconditional p-value that the fixed runs fail less often than the
    control: the largest, over the common failure probability q in [0, 1], probability of a
    table whose Fisher p-value (:func:`fisher_one_sided`, the statistic) is at most the one
    observed (R. D. Boschloo, "Raised conditional level of significance for the 2 × 2-table
    when testing the equality of two probabilities", Statistica Neerlandica 24, 1970; scipy's
    ``boschloo_exact(..., alternative="greater")`` computes the same). It is never larger than
    Fisher's, so three runs of each can prove a fix (1/64), where Fisher needs four.

    The supremum is taken on a grid of 2,000 values of q, then refined around the best one.

    Raises:
        ValueError: a count outside ``0 … runs``.
    """
    if not (0 <= control_failed <= control_runs and 0 <= fixed_failed <= fixed_runs):
        raise ValueError("failures must lie between 0 and the runs")
    observed = fisher_one_sided(control_failed, control_runs, fixed_failed, fixed_runs) * (1 + 1e-9)
    extreme = [
        (a, b)
        for a in range(control_runs + 1)
        for b in range(fixed_runs + 1)
        if fisher_one_sided(a, control_runs, b, fixed_runs) <= observed
    ]
    total = control_runs + fixed_runs
    weights = [0] * (total + 1)  # by the failures in all: the tables' count of ways to fall so
    for a, b in extreme:
        weights[a + b] += math.comb(control_runs, a) * math.comb(fixed_runs, b)
    terms = [(k, w) for k, w in enumerate(weights) if w]

    def chance(q: float) -> float:
        return sum(w * q**k * (1 - q) ** (total - k) for k, w in terms)

    grid = 2000
    best_i = max(range(grid + 1), key=lambda i: chance(i / grid))
    finer = [best_i / grid + k / (grid * 50) for k in range(-50, 51)]
    return min(1.0, max(chance(min(1.0, max(0.0, q))) for q in finer))


def runs_needed(control_failed: int, control_runs: int) -> Optional[int]:
    """The fewest runs of each variant (at most ``MAX_RUNS``) with which a control that fails
    as often as this one did (at least once) and fixed runs that all pass reach p < ``ALPHA``
    (:func:`boschloo_one_sided`); ``None`` when the control never failed or no count up to
    ``MAX_RUNS`` would do."""
    if control_failed <= 0 or control_runs <= 0:
        return None
    rate = control_failed / control_runs
    for n in range(DEFAULT_RUNS if rate == 1 else 2, MAX_RUNS + 1):
        if boschloo_one_sided(max(1, math.floor(rate * n)), n, 0, n) < ALPHA:
            return n
    return None


@dataclass(frozen=True)
class Verdict:
    """The verdict: ``holds`` (``True``: the fix holds; ``False``: it does not, or it could
    not be proven), its one ``line``, the ``p_value`` for a flaky control (``None``: not
    computed), and the ``change`` to make in the code (``None`` when it does not hold)."""

    holds: bool
    line: str
    p_value: Optional[float]
    change: Optional[str]


def _batches_range(results: Sequence[RunResult]) -> str:
    values = sorted(r.batches for r in results if r.batches is not None)
    if not values:
        return "?"
    return f"batch {values[0]}" if values[0] == values[-1] else f"batches {values[0]}–{values[-1]}"


def change_of(fix: Fix, origin: Origin) -> str:
    """The code change that makes the fix permanent, where to make it."""
    parts = []
    if fix.loader:
        args = ", ".join(f"{k}={v!r}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in fix.loader)
        where = f" for the loader iterated at {origin.sites[0]}" if origin.sites else ""
        parts.append(f"DataLoader(..., {args}){where}")
    if fix.sharing_strategy:
        parts.append(
            f'torch.multiprocessing.set_sharing_strategy("{fix.sharing_strategy}") at the start of the program'
        )
    if fix.worker_threads is not None:
        where = f" of the loader iterated at {origin.sites[0]}" if origin.sites else ""
        parts.append(f"torch.set_num_threads({fix.worker_threads}) at the end of the worker_init_fn{where}")
    for k, v in fix.env:
        parts.append(f"{k}={shlex.quote(v)} in the job's environment")
    if fix.nofile is not None:
        parts.append(f"ulimit -n {fix.nofile} (Docker --ulimit nofile={fix.nofile}:{fix.nofile})")
    return "; ".join(parts)


def verdict(origin: Origin, fix: Fix, results: Sequence[RunResult], own_command: bool = False) -> Verdict:
    """Judge the runs: the fix holds when no fixed run failed and Boschloo's one-sided p-value
    (:func:`boschloo_one_sided`) of the control's failures against the fixed runs' is below
    ``ALPHA``, whatever the runs' count: one failed control and one passing fixed run prove
    nothing. A control run counts as failed only when it failed as the report did (the
    report's kind); a fixed run in which the fix was not seen applied proves nothing. A fixed
    run that ended in a suspected hang of another kind (:func:`inconclusive`) is neither a pass
    nor a failure: it is said as such and left out of the test (one run fewer), so it can never
    make the fix "not hold"; a proven hang, a crash, or a hang of the report's kind does.
    ``own_command``: the runs ran the command given after ``--``, not the report's."""
    control = [r for r in results if r.variant == CONTROL]
    unclear = [r for r in results if r.variant == FIXED and inconclusive(r, origin)]
    fixed = [r for r in results if r.variant == FIXED and not inconclusive(r, origin)]
    c_fail, f_fail = sum(r.failed and r.kind == origin.kind for r in control), sum(r.failed for r in fixed)
    total_fixed = len(fixed) + len(unclear)
    unclear_text = ""
    if unclear:
        kinds = ", ".join(sorted({r.kind or "?" for r in unclear}))
        unclear_text = (
            f"; {len(unclear)} fixed run(s) inconclusive: a suspected stall of another kind ({kinds}), not the "
            f"report's ({origin.kind}) and not proven, is no evidence either way and is not counted"
            + (f" (its report: {unclear[0].reports[0]})" if unclear[0].reports else "")
        )
    c_other = sorted({r.kind or r.outcome for r in control if r.failed and r.kind != origin.kind})
    point = f"batch {origin.failed_at_batch}" if origin.failed_at_batch is not None else "its failure"
    what = fix.describe()
    c_kinds = sorted({r.kind for r in control if r.failed and r.kind == origin.kind})
    outcomes = {r.outcome for r in control if r.failed and r.kind == origin.kind}
    verb = "hung" if outcomes == {"hung"} else "crashed" if outcomes == {"crashed"} else "failed"
    as_reported = [r for r in control if r.failed and r.kind == origin.kind]
    control_text = f"unchanged {c_fail}/{len(control)} " + (
        f"{verb} ({', '.join(c_kinds)}) at {_batches_range(as_reported)}" if c_fail else "failed as the report did"
    )
    if c_other:
        control_text += f" ({len([r for r in control if r.failed]) - c_fail} failed otherwise: {', '.join(c_other)})"
    slow = [r for r in results if r.outcome == "timed out"]
    if slow:
        return Verdict(
            False,
            f"not proven: {len(slow)} run(s) reached --max-run-s before their bound (neither hung nor passed): "
            "give a larger --max-run-s, or a smaller --batches or --seconds",
            None,
            None,
        )
    early = next((r for r in results if r.before_first_batch), None)
    if early is not None:
        return Verdict(
            False,
            f"not proven: the {early.variant} run {early.index} failed by itself before its first batch, with no "
            f"report (exit code {early.exit_code}): {early.error or 'no output'}; the runs do not reproduce what the "
            "original had (an input file, a terminal on stdin, a mount, a cgroup): read its output "
            f"({early.variant}-{early.index}/{OUTPUT_FILE} in the verify folder)",
            None,
            None,
        )
    if c_fail == 0:
        advice = (
            "the command given after -- is not the report's: does it reach the same failure?"
            if own_command
            else "flaky: try --runs 10"
        )
        failed_as = "hang" if origin.mode == "hang" else "crash"
        return Verdict(
            False,
            f"not proven: the control did not {failed_as} as the report did ({origin.kind}) in {len(control)} run(s)"
            + (f"; it failed otherwise ({', '.join(c_other)})" if c_other else "")
            + f" ({advice}); with {what} {len(fixed) - f_fail}/{total_fixed} passed{unclear_text}",
            None,
            None,
        )
    unapplied = [r for r in fixed + unclear if r.applied is False]
    if unapplied:
        return Verdict(
            False,
            f"not proven: the fix ({what}) was not seen applied in {len(unapplied)} of {total_fixed} fixed run(s) "
            "(the recorder saw the loader's own settings: its site differs from the report's, or the hook did not "
            "load; try --all-loaders)",
            None,
            None,
        )
    passed = [r for r in fixed if not r.failed]
    original = f"the original {'hung' if origin.mode == 'hang' else 'crashed'} at {point}"
    if passed and all(r.outcome == "ended" for r in passed):
        head, detail = "ran to their end", f"up to {_batches_range(passed)}; {original}"
    elif passed:
        head, detail = f"passed {_batches_range(passed)}", original
    else:
        head, detail = "passed", original
    fixed_text = f"with {what} {len(passed)}/{total_fixed} run(s) {head} ({detail}){unclear_text}"
    if f_fail:
        f_kinds = sorted({r.kind for r in fixed if r.failed and r.kind})
        first = next(r for r in fixed if r.failed)
        other = [k for k in f_kinds if k not in c_kinds]
        why = (
            f"; the fix itself fails otherwise ({', '.join(other)}): read that run's report"
            + (f" ({first.reports[0]})" if first.reports else "")
            if other
            else ""
        )
        return Verdict(
            False,
            f"the fix does not hold: {fixed_text}; {f_fail} failed ({', '.join(f_kinds) or '?'}); {control_text}{why}",
            None,
            None,
        )
    if not fixed:
        return Verdict(
            False,
            f"not proven: {fixed_text}; {control_text}; no fixed run could be judged: run verify again, "
            "on a less loaded machine or with more --runs",
            None,
            None,
        )
    p = boschloo_one_sided(c_fail, len(control), f_fail, len(fixed))
    if p < ALPHA:
        return Verdict(
            True, f"the fix holds (one-sided p={_p(p)}): {fixed_text}; {control_text}", p, change_of(fix, origin)
        )
    needed = runs_needed(c_fail, len(control))
    more = (
        f"--runs {needed} would prove it if the runs go the same way"
        if needed is not None
        else f"a control that fails this seldom cannot prove a fix in {MAX_RUNS} runs"
    )
    return Verdict(
        False,
        f"not proven (one-sided p={_p(p)}, needs p < {ALPHA:g}): {fixed_text}; {control_text}; too few runs: {more}",
        p,
        None,
    )


def _p(p: float) -> str:
    """A p-value for the verdict line: three decimals, or ``<0.001``."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def cost_line(results: Sequence[RunResult]) -> Optional[str]:
    """The fix's cost, from the runs that did not fail (a hung run's rate measures the hang):
    median samples/s and first-batch latency of each variant with their range (least–most),
    given only with at least ``DEFAULT_RUNS`` such runs of each; the ratio of the medians only
    where the two ranges do not overlap (else the spread, not the fix, may make it). ``None``:
    too few runs to say anything."""

    def spread(values) -> Optional[Tuple[float, float, float]]:
        values = sorted(v for v in values if v is not None)
        return (values[len(values) // 2], values[0], values[-1]) if len(values) >= DEFAULT_RUNS else None

    parts = []
    for name, field, unit in (("samples/s", "samples_per_s", ""), ("first batch", "first_batch_s", " s")):
        c, f = (spread(getattr(r, field) for r in results if r.variant == v and not r.failed) for v in (CONTROL, FIXED))
        if c is None or f is None:
            continue
        text = (
            f"{name} {c[0]:.3g}{unit} ({c[1]:.3g}–{c[2]:.3g}) unchanged, "
            f"{f[0]:.3g}{unit} ({f[1]:.3g}–{f[2]:.3g}) with the fix"
        )
        apart = c[2] < f[1] or f[2] < c[1]
        if apart and c[0]:
            text += f" ({f[0] / c[0]:.2f}x)"
        elif not apart:
            text += " (ranges overlap: no difference shown)"
        parts.append(text)
    return "cost: " + "; ".join(parts) + " (medians, least–most)" if parts else None


def table(results: Sequence[RunResult]) -> str:
    """One row per run (tabulate)."""
    rows = [
        [
            r.variant,
            r.index,
            r.outcome + (f" ({r.kind}{', suspected' if r.certainty == 'suspected' else ''})" if r.kind else ""),
            "-" if r.batches is None else r.batches,
            "-" if r.samples_per_s is None else f"{r.samples_per_s:g}",
            "-" if r.first_batch_s is None else f"{r.first_batch_s:.2f}",
            "-" if r.elapsed_s is None else f"{r.elapsed_s:.0f}",
        ]
        for r in results
    ]
    return tabulate(rows, headers=["variant", "run", "result", "batches", "samples/s", "first batch s", "run s"])
