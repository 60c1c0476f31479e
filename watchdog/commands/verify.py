"""``dlwatch verify REPORT``: prove a report's fix on the user's own job.

The job of the report is started again, under ``dlwatch run`` with the report's settings,
unchanged (the control) and with the fix applied (:class:`~watchdog.types.Fix`, declared by
the rule beside its remedy; the job's recorder applies its loader part, ``_dlwatch_fix``),
alternating, ``--runs`` times each. Each run is bounded
(:class:`~watchdog.commands.verify_runs.RunBound`): it ends once it has delivered ``--batches``
batches (past the point where the original hung), after ``--seconds``, when a hang is reported,
or when it ends by itself. The verdict says whether the fix holds only when the runs reach
significance: Boschloo's exact test (:func:`~watchdog.commands.verify_verdict.boschloo_one_sided`)
of "the fixed runs fail less often than the control" gives p < ``ALPHA``. A control run counts
as failed only when it failed as the report did (its kind); one failed control and one passing
fixed run prove nothing (p = 0.25), and the line says how many runs would.

The re-run executes the user's program again, with its side effects: the output says so
first. It runs as the invoking user, in the report's working directory, with the current
environment (never the report's redacted copy), and refuses a report whose command is not
known, whose command was redacted, whose user is another, or (without ``--yes``) that came
from ``attach``.

What verify runs is only what the caller already trusts
(:func:`~watchdog.commands.verify_trust.trusted_place`): its own interpreter started isolated
(``python -I``: neither the working directory nor ``PYTHONPATH`` nor the user's site directory
on ``sys.path``, so a ``json.py`` planted in the job's folder is never imported by dlwatch;
https://docs.python.org/3/using/cmdline.html#cmdoption-I), in a working directory, and with
command files, that no other user can change (each entry met on the way to each, the links and
their folders included, belongs to the caller or root, writable by no one else, in folders no
one else can rename entries of; the runs use the checked real paths, and so does everything
verify writes beside the report), never a job whose command changes user
(``runuser``, ``sudo``, …), and never an environment variable from the report outside
``REPORT_ENV_NAMES``.

This module holds the parser and the command (:func:`cmd_verify`, and :func:`verify_throughput`
for an ``input_bound`` warning, whose statistics are :mod:`watchdog.commands.throughput_ab`'s);
the plan is :mod:`watchdog.commands.verify_plan`'s, the verdict
:mod:`watchdog.commands.verify_verdict`'s, the runs :mod:`watchdog.commands.verify_runs`'s and
the checks before any run :mod:`watchdog.commands.verify_trust`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .. import redact
from ..errors import ReportWriteError, WatchdogError
from ..exits import Exit, of_signal
from ..report import browse, writer
from ..text import one_line
from ..types import Fix
from . import throughput_ab
from .verify_plan import (
    ALPHA,
    CONTROL,
    DEFAULT_MAX_RUN_S,
    DEFAULT_RUNS,
    FIXED,
    OUTPUT_FILE,
    REPORT_ENV_NAMES,
    Origin,
    VerifyError,
    bound_of,
    fix_as_shown,
    parse_fix,
    plan,
    settings_for_runs,
)
from .verify_runs import Stopped, raise_stopped, run_argv, run_one, shm_left, write_settings
from .verify_trust import (
    check_rerunnable,
    checked_command,
    differences,
    fix_cannot_apply,
    origin_of,
    report_place,
    verify_folder,
)
from .verify_verdict import RunResult, change_of, cost_line, inconclusive, table, verdict

SPEED_SAFETY = (
    "dlwatch verify starts your program again, {n} time(s), as you ({user}) in {cwd}: whatever it does besides "
    "training (writing checkpoints, logging to a service, changing data) happens again. Each run is ended after its "
    "batches are counted."
)
SAFETY = (
    "dlwatch verify starts your program again, {n} time(s), as you ({user}) in {cwd}: whatever it does besides "
    "training (writing checkpoints, logging to a service, changing data) happens again. Each run is ended once it "
    "passes the point where the original failed."
)


def add_parser(sub) -> None:
    """The ``verify`` subcommand's parser, under ``sub`` (argparse subparsers)."""
    p = sub.add_parser(
        "verify",
        usage="dlwatch verify [options] (REPORT | --last [KIND]) [-- CMD ARGS…]",
        help="prove a report's fix: re-run the job unchanged and with the fix, side by side: dlwatch verify REPORT",
        description="Start the job of a hang or crash report again, under `dlwatch run` with the report's settings: "
        "unchanged, and with the report's fix applied by dlwatch (no edit to your code), alternating, --runs times "
        "each; each run ends once it passes the point where the original failed. Then say whether the fix holds. "
        "THIS RUNS YOUR PROGRAM AGAIN: its side effects (checkpoints, logging services, data it writes) happen again. "
        "Exit codes: 0 the fix holds; 1 it does not, or the control did not fail; 2 bad input (no such report, no "
        "mechanical fix, a job that cannot be re-run).",
    )
    p.add_argument("report", nargs="?", help="a report folder (or a file in it)")
    p.add_argument(
        "--last",
        nargs="?",
        const="",
        metavar="KIND",
        help="the newest report under --report-dir; with KIND, the newest of that kind (fork_inherited_lock, …); "
        "verify prints which report it took",
    )
    p.add_argument("--report-dir", metavar="DIR", default="dlwatch-reports", help="for --last (dlwatch-reports)")
    p.add_argument(
        "--runs",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"runs of each variant ({DEFAULT_RUNS}: the fewest that can prove a fix, p = 1/64 < {ALPHA:g}; for an "
        f"input_bound warning, pairs of runs: {throughput_ab.DEFAULT_PAIRS})",
    )
    p.add_argument(
        "--batches",
        type=_positive_int,
        metavar="K",
        help=f"end each run after K batches (input_bound: K measured after {throughput_ab.WARMUP_BATCHES} of warm-up)",
    )
    p.add_argument("--seconds", type=_positive_float, metavar="S", help="end each run after S seconds")
    p.add_argument(
        "--max-run-s",
        type=_positive_float,
        default=DEFAULT_MAX_RUN_S,
        metavar="S",
        help=f"end any run after S seconds, whatever its bound ({DEFAULT_MAX_RUN_S:g})",
    )
    p.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="apply this instead of, or besides, the report's fix: a DataLoader setting "
        "(multiprocessing_context=spawn, num_workers=0, timeout=120), sharing_strategy=file_system, "
        "rlimit_nofile=65536, env.NAME=VALUE; repeatable",
    )
    p.add_argument("--all-loaders", action="store_true", help="apply the loader part to every DataLoader")
    p.add_argument("--only", action="store_true", help="apply only the --fix items, not the report's fix")
    p.add_argument("--dry-run", action="store_true", help="print each run's command and changes; start nothing")
    p.add_argument("--json", metavar="PATH", help="write the runs and the verdict as JSON")
    p.add_argument(
        "--ladder",
        action="store_true",
        help="input_bound, a num_workers change: double it rung by rung up to the usable CPUs while each rung gains",
    )
    p.add_argument(
        "--busy-limit",
        type=_share,
        default=throughput_ab.WITHHOLD_SHARE,
        metavar="SHARE",
        help="input_bound: withhold the verdict when other processes used this share of the CPUs or more during the "
        f"runs (0 to 1; {throughput_ab.WITHHOLD_SHARE:g}; 1: never)",
    )
    p.add_argument("--yes", action="store_true", help="re-run a job whose report came from `dlwatch attach`")
    p.set_defaults(cmd=[])  # what follows `--`: the command to run instead of the report's (split off by the CLI)


def _positive_int(text: str) -> int:
    from ..argtypes import positive_int

    return positive_int(text)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share in (0, 1]")
    return value


def _positive_float(text: str) -> float:
    from ..argtypes import positive_float

    return positive_float(text)


def cmd_verify(args: argparse.Namespace, say=print) -> int:
    """``dlwatch verify``: see the module docstring; returns the exit code.

    Raises:
        VerifyError, ReportNotFound: bad input (exit code 2, said by the caller).
    """
    say = _escaped(say)
    last = args.last is not None
    if last == bool(args.report):
        raise VerifyError("REPORT", "give a report folder or --last [KIND] (one of them)")
    try:
        found = browse.folders(args.report_dir) if last else []
    except WatchdogError as e:
        raise VerifyError("--last", f"{e} (--report-dir DIR names where the reports are)") from None
    skipped = 0
    if last:
        mine = [f for f in found if _owner(f) in (os.geteuid(), 0)]
        skipped, found = len(found) - len(mine), mine
    if last and args.last:
        found = [f for f in found if _first_kind(f) == args.last]
    if skipped:
        say(f"note: --last skipped {skipped} report folder(s) of other users in {one_line(args.report_dir)}")
    folder = found[0] if found else None
    if last and folder is None:
        of_kind = f" of kind {args.last}" if args.last else ""
        raise VerifyError(args.report_dir, f"no report{of_kind} there (--report-dir DIR names where the reports are)")
    folder = report_place(os.path.abspath(browse.report_folder(folder or args.report)))
    origin = origin_of(folder)
    own = parse_fix(args.fix)
    fix = origin.fix.merged(own) if origin.fix is not None and not args.only else own
    if fix == Fix():
        raise VerifyError(
            folder,
            f"{origin.kind} has no mechanical fix: its remedy is a change to the code (read the report's fix); "
            "try your own idea with --fix KEY=VALUE",
        )
    cannot = fix_cannot_apply(origin, fix)
    if cannot:
        raise VerifyError(folder, cannot)
    if fix.loader and not origin.sites and not args.all_loaders:
        raise VerifyError(folder, "the report names no DataLoader site (no inside view): add --all-loaders")
    untrusted = sorted(
        k for k, _ in (origin.fix.env if origin.fix and not args.only else ()) if k not in REPORT_ENV_NAMES
    )
    if untrusted:
        raise VerifyError(
            folder,
            f"the report's fix sets {', '.join(untrusted)}, which verify never takes from a file (it could choose what "
            "runs as you): set it yourself with --fix env.NAME=VALUE if you mean it",
        )
    command = list(args.cmd) or list(origin.command)
    own_command = bool(args.cmd) and tuple(args.cmd) != origin.command
    # A dry run starts nothing: what --yes consents to is said, not asked for
    cwd = check_rerunnable(origin, command, args.yes or args.dry_run)
    consent = ""
    if args.dry_run and not args.yes:
        try:
            check_rerunnable(origin, command, False)
        except VerifyError as e:
            consent = str(e)
    command = checked_command(command, cwd)  # each path argument by its checked real path
    if args.json and (os.path.isdir(args.json) or not os.path.isdir(os.path.dirname(os.path.abspath(args.json)))):
        raise VerifyError(f"--json {args.json}", "must name a file in a folder that exists")
    shown = fix_as_shown(fix)  # what is printed and written: secret-named variables redacted
    shown_command = one_line(shlex.join(redact.cmdline(command)))
    by_speed = origin.kind in throughput_ab.KINDS  # proven by throughput (NOTE [ Throughput A/B ])
    if by_speed:
        speed = throughput_ab.bound_for(origin.failed_at_batch, origin.ran_s, args.batches, args.seconds)
        bound: Tuple[Optional[int], Optional[float]] = (speed.batches, speed.seconds)
        runs = plan(origin, fix, args.runs or throughput_ab.DEFAULT_PAIRS, bound, args.all_loaders)
    else:
        bound = bound_of(origin, args.batches, args.seconds)
        runs = plan(origin, fix, args.runs or DEFAULT_RUNS, bound, args.all_loaders)
    uid_name = _user_name()
    if args.dry_run:
        say(f"dlwatch verify would start your program {len(runs)} time(s), as {uid_name} in {one_line(cwd)}:")
    else:
        say((SPEED_SAFETY if by_speed else SAFETY).format(n=len(runs), user=uid_name, cwd=one_line(cwd)))
    newest = f" (--last{' ' + one_line(args.last) if args.last else ''}: the newest of {len(found)})" if last else ""
    say(
        f"report: {one_line(folder)} ({one_line(origin.kind)}, {origin.mode}){newest}; "
        f"fix: {one_line(shown.describe())}"
    )
    for line in differences(origin):
        say(line)
    if own_command:
        given = one_line(shlex.join(redact.cmdline(origin.command))) or "?"
        say(f"the command: {shown_command} (given after --; the report's was {given})")
    if consent:
        say(f"note: the runs themselves need --yes: {consent}")
    if args.dry_run:
        verify_dir = os.path.join(os.path.dirname(folder), "VERIFY")
        for variant, i, run_args, env in runs:
            changes = " ".join(f"{k}={shlex.quote(v)}" for k, v in redact.env(env).items())
            limit = f" (RLIMIT_NOFILE {fix.nofile})" if variant == FIXED and fix.nofile is not None else ""
            run_dir = os.path.join(verify_dir, f"{variant}-{i}")
            argv = run_argv(os.path.join(verify_dir, "settings.yaml"), run_dir, run_args, redact.cmdline(command))
            say(one_line(f"{variant} {i}: {changes + ' ' if changes else ''}{shlex.join(argv)}{limit}"))
        say(f"(VERIFY: a new verify-<UTC time>-<pid>-<random>/ folder beside the report, 0700; cwd {one_line(cwd)})")
        return Exit.OK
    if by_speed:
        return verify_throughput(args, origin, fix, cwd, command, speed, say)
    out = verify_folder(folder)
    settings_path = os.path.join(out, "settings.yaml")
    write_settings(settings_path, settings_for_runs(origin))
    results: List[RunResult] = []
    previous = {sig: signal.signal(sig, raise_stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for variant, i, run_args, env in runs:
            say(f"run {len(results) + 1}/{len(runs)}: {variant} {i} …")
            result = run_one(origin, cwd, variant, i, run_args, env, fix, out, settings_path, command, args.max_run_s)
            results.append(result)
            say(
                f"  {result.outcome}"
                + (f" ({result.kind})" if result.kind else "")
                + (
                    ", suspected: inconclusive (a stall of another kind than the report's, not counted)"
                    if variant == FIXED and inconclusive(result, origin)
                    else ""
                )
                + f", {result.batches} batches; its output: {os.path.join(out, f'{variant}-{i}', OUTPUT_FILE)}"
            )
    except Stopped as e:
        say(f"dlwatch: verify stopped by {signal.Signals(e.signum).name}; the run in progress was ended ({out})")
        return of_signal(e.signum)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    judged = verdict(origin, shown, results, own_command)
    say("")
    for row in table(results).splitlines():
        say(row)
    say("")
    say(judged.line)
    cost = cost_line(results) if judged.holds else None
    if cost:
        say(cost)
    left = shm_left(results)
    if left:
        say(left)
    if judged.change:
        say(f"make it permanent: {judged.change}")
    say(f"runs and their reports: {out}")
    doc = {
        "report": folder,
        "kind": origin.kind,
        "fix": shown.as_dict(),
        "bound": {"batches": bound[0], "seconds": bound[1]},
        "runs": [dataclasses.asdict(r) for r in results],
        "holds": judged.holds,
        "verdict": judged.line,
        "p_value": judged.p_value,
        "change": judged.change,
        "cost": cost,
        "folder": out,
    }
    try:
        writer.write_json(os.path.join(out, writer.VERIFY_FILE), redact.document(doc))
        writer.write_verify(folder, redact.document(doc))  # `dlwatch reports` and `show` say it
        if args.json:
            writer.write_json(os.path.abspath(args.json), redact.document(doc))
    except ReportWriteError as e:
        say(f"dlwatch: {e}")
    return Exit.OK if judged.holds else Exit.FAILED


def _rung_runs(
    origin: Origin, base: Optional[Fix], fix: Fix, runs: int, bound: Tuple[Optional[int], Optional[float]], every: bool
) -> List[Tuple[str, int, List[str], Dict[str, str]]]:
    """:func:`~watchdog.commands.verify_plan.plan` for a rung of the throughput path: ``fix`` in
    the fixed runs, ``base`` (the last change that gained; ``None``: none, the job as it is) in
    the others."""
    out = plan(origin, fix, runs, bound, every)
    if base is None:
        return out
    base_env = plan(origin, base, 1, bound, every)[1][3]
    return [(v, i, a, dict(base_env) if v == CONTROL else e) for v, i, a, e in out]


def _speed_run(r: RunResult, warmup: int) -> throughput_ab.Run:
    """``r`` as the throughput statistics see it: its rate past ``warmup`` batches, and why it
    does not count (it failed, reached ``--max-run-s``, or did not have the change applied)."""
    measured = throughput_ab.rate_past_warmup(r.progress, warmup)
    problem = ""
    if r.failed:
        problem = f"{r.outcome}" + (f" ({r.kind})" if r.kind else "") + (f": {r.error}" if r.error else "")
    elif r.outcome == "timed out":
        problem = "reached --max-run-s before its bound: give a larger --max-run-s or fewer --batches"
    elif r.applied is False:
        problem = (
            "did not have the change applied (the recorder saw the loader's own settings: its site differs from "
            "the report's, or the hook did not load; try --all-loaders)"
        )
    return throughput_ab.Run(
        "B" if r.variant == FIXED else "A",
        r.index,
        None if measured is None else measured[0] / measured[1],
        r.others_cpus,
        r.host_cpus,
        problem,
    )


def verify_throughput(
    args: argparse.Namespace,
    origin: Origin,
    fix: Fix,
    cwd: str,
    command: Sequence[str],
    bound: throughput_ab.Bound,
    say=print,
) -> int:
    """The throughput path of ``dlwatch verify`` for an ``input_bound`` warning (NOTE [
    Throughput A/B ]): alternating runs without and with ``fix``, each ended at ``bound``;
    with ``--ladder`` and a ``num_workers`` change, rung after rung while each gains. Writes
    ``verify.json`` as the failure path does, with ``throughput`` (and ``rungs``). Returns 0
    when a gain is shown, else 1; 128 + N when stopped by a signal."""
    say = _escaped(say)
    out = verify_folder(origin.folder)
    settings_path = os.path.join(out, "settings.yaml")
    write_settings(settings_path, settings_for_runs(origin))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = dict(fix.loader).get("num_workers")
    only_workers = (
        len(fix.loader) == 1
        and isinstance(workers, int)
        and not (fix.env or fix.sharing_strategy or fix.worker_threads is not None)
    )
    climb = bool(getattr(args, "ladder", False))
    ladder = throughput_ab.ladder_candidates(workers, usable) if climb and only_workers else None  # type: ignore[arg-type]
    if climb and ladder is None:
        say("note: --ladder climbs num_workers only; the change has other parts: one A/B of it")
    pairs = args.runs or throughput_ab.DEFAULT_PAIRS
    say(
        f"each run: {bound.warmup} batches of warm-up, then {bound.measured} measured (or {bound.seconds:.0f} s); "
        f"{pairs} pair(s) of runs, without then with the change"
        + (f"; the ladder: num_workers {', '.join(map(str, ladder))} (up to {usable} usable CPUs)" if ladder else "")
    )
    rungs: List[dict] = []
    steps: List[Tuple[int, str]] = []  # the ladder's (num_workers, state) so far
    all_results: List[RunResult] = []
    base: Optional[Fix] = None
    current = fix
    previous = {sig: signal.signal(sig, raise_stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            k = len(rungs) + 1
            where = os.path.join(out, f"rung-{k}") if ladder else out
            if ladder:
                os.makedirs(where, mode=0o700)
                against = fix_as_shown(base).describe() if base else "the job as it is"
                say(f"rung {k}: {fix_as_shown(current).describe()} against {against}")
            runs = _rung_runs(origin, base, current, pairs, (bound.batches, bound.seconds), args.all_loaders)
            results: List[RunResult] = []
            for variant, i, run_args, env in runs:
                say(f"run {len(results) + 1}/{len(runs)}: {variant} {i} …")
                r = run_one(
                    origin, cwd, variant, i, run_args, env, current, where, settings_path, command, args.max_run_s, True
                )
                results.append(r)
                seen = _speed_run(r, bound.warmup)
                say(
                    f"  {r.outcome}"
                    + (f" ({r.kind})" if r.kind else "")
                    + f", {r.batches} batches"
                    + (
                        f", {seen.rate:.3g} batches/s past the first {bound.warmup}"
                        if seen.rate
                        else ", rate not measured"
                    )
                    + (f"; others used {r.others_cpus:.2f} CPUs" if r.others_cpus is not None else "")
                    + f"; its output: {os.path.join(where, f'{variant}-{i}', OUTPUT_FILE)}"
                )
            all_results += results
            what = fix_as_shown(current).describe()
            judged = throughput_ab.judge(
                [_speed_run(r, bound.warmup) for r in results],
                what,
                getattr(args, "busy_limit", None) or throughput_ab.WITHHOLD_SHARE,
            )
            say("")
            for row in table(results).splitlines():
                say(row)
            say(judged.load_line)
            say(judged.line)
            rungs.append(
                {
                    "fix": fix_as_shown(current).as_dict(),
                    "base": fix_as_shown(base).as_dict() if base else None,
                    **judged.as_dict(),
                }
            )
            if ladder is None:
                break
            steps.append((ladder[k - 1], judged.state))
            best, climb = throughput_ab.ladder_pick(steps)
            if not climb or k >= len(ladder):
                break
            base, current = current, Fix(loader=(("num_workers", ladder[k]),))
    except Stopped as e:
        say(f"dlwatch: verify stopped by {signal.Signals(e.signum).name}; the run in progress was ended ({out})")
        return of_signal(e.signum)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if ladder is not None:
        best, _ = throughput_ab.ladder_pick(steps)
        chosen = None if best is None else Fix(loader=(("num_workers", best),))
        line = (
            f"the ladder: num_workers={best} is the last that gained ({len(rungs)} rung(s)); the last rung: "
            f"{rungs[-1]['line']}"
            if best is not None
            else f"the ladder: the first rung showed no gain: {rungs[0]['line']}"
        )
    else:
        chosen = fix if rungs[0]["state"] == throughput_ab.GAIN else None
        line = str(rungs[0]["line"])
    change = change_of(chosen, origin) if chosen is not None else None
    if ladder is not None:
        say(line)
    if change:
        say(f"make it permanent: {change}")
    say(f"runs and their reports: {out}")
    doc = {
        "report": origin.folder,
        "kind": origin.kind,
        "fix": fix_as_shown(fix).as_dict(),
        "bound": {"batches": bound.batches, "seconds": bound.seconds, "warmup_batches": bound.warmup},
        "runs": [dataclasses.asdict(r) for r in all_results],
        "holds": chosen is not None,
        "verdict": line,
        "p_value": None,
        "change": change,
        "cost": None,
        "throughput": rungs[_last_gain(rungs) if chosen is not None else -1],
        "rungs": rungs if ladder is not None else None,
        "folder": out,
    }
    try:
        writer.write_json(os.path.join(out, writer.VERIFY_FILE), redact.document(doc))
        writer.write_verify(origin.folder, redact.document(doc))
        if args.json:
            writer.write_json(os.path.abspath(args.json), redact.document(doc))
    except ReportWriteError as e:
        say(f"dlwatch: {e}")
    return Exit.OK if chosen is not None else Exit.FAILED


def _last_gain(rungs: Sequence[dict]) -> int:
    """The index of the last rung that gained in the unbroken run of gains from the first."""
    last = 0
    for i, rung in enumerate(rungs):
        if rung["state"] != throughput_ab.GAIN:
            break
        last = i
    return last


def _first_kind(folder: str) -> str:
    """The kind of the first diagnosis of the report in ``folder``, ``""`` when unreadable."""
    try:
        doc = browse.load(folder)
    except WatchdogError:
        return ""
    first = (doc.get("diagnoses") or [{}])[0]
    return str(first.get("kind") or "") if isinstance(first, dict) else ""


def _escaped(say: Callable[[str], object]) -> Callable[[str], None]:
    """``say`` for lines that hold what a report or another user controls (its kind, fix values,
    command, folder names): each line written on one line with every control character escaped
    (:func:`watchdog.text.one_line`), so a value can neither forge a line nor send an escape
    sequence to the terminal; a ``say`` made here is returned as it is (escaped once)."""
    if getattr(say, "escapes", False):
        return say  # type: ignore[return-value]

    def escaped(line: str) -> None:
        say(one_line(line))

    escaped.escapes = True  # type: ignore[attr-defined]
    return escaped


def _owner(folder: str) -> int:
    """The uid that owns ``folder`` (``lstat``), ``-1`` when it cannot be read."""
    try:
        return os.lstat(folder).st_uid
    except OSError:
        return -1


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"
