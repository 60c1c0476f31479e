"""Crash rules of an exception a worker raised and main re-raised: in the Dataset
(``dataset_error``), in ``collate_fn`` (``collate_error``) or in ``worker_init_fn``
(``worker_init_error``). PyTorch re-raises it in main as "Caught X in DataLoader worker
process N" with the worker's "Original Traceback" (``ExceptionWrapper`` in torch/_utils.py;
``StderrFacts.caught``, ``.original``); the inside view's record of the failing batch says
which samples, and whether persistent workers held a stale copy of the Dataset."""

from __future__ import annotations

from typing import List, Optional, Tuple

from ... import frames
from ...collect.stderr_facts import is_loader_resource_error, stderr_facts
from ...types import SEVERITY_CRASH, Facts, WorkerFailure
from ..common import DOC_DATALOADER, STAGE_COLLATE, STAGE_DATASET, STAGE_WORKER_INIT
from ..engine import Finding, rule
from .shared import CRASH, exit_clause

_STAGE_REMEDY = {  # the collate stage's is _collate_remedy
    STAGE_DATASET: (
        "Fix the Dataset code at the location above; the loader itself is fine. Reproduce in one process with "
        "num_workers=0 (or dataset[i] for the failing index) to debug it in place."
    ),
    STAGE_WORKER_INIT: (
        "worker_init_fn raised before the worker fetched anything; with num_workers=0 it never runs, so call it "
        "directly to reproduce: worker_init_fn(0) in one process (torch.utils.data.get_worker_info() is None "
        "there). Check what it reads from its surroundings (environment variables, files, the dataset's state)."
    ),
}


def _collate_remedy(samples: str) -> str:
    """The collate stage's remedy, reproducing with ``samples`` (the failing batch's, or a
    first batch's: ``range(batch_size)``)."""
    return (
        "The samples are fine one by one; putting them into a batch failed. Reproduce in one process with "
        f"collate_fn([dataset[i] for i in {samples}]) (torch.utils.data.default_collate when you pass none) and "
        "look at each field's type: default_collate stacks tensors, numpy arrays of numbers, numbers, strings, and "
        "dicts, lists and tuples of those; an object array (a pandas object column), None or a custom class fails. "
        "Convert that field in __getitem__, or pass a collate_fn that handles it."
    )


def _raised_failure(facts: Facts, worker_id: Optional[int]) -> Optional[WorkerFailure]:
    """The batch whose exception main re-raised, as the worker with ``worker_id`` recorded it
    (:class:`~watchdog.types.WorkerFailure`): main re-raises in batch order, and a worker fetches
    its batches in order, so the first of that worker's latest run of failures (another worker
    process, or a lower batch index than the one before, starts a new iterator's run)."""
    mine = sorted(
        (f for f in (facts.inside.failures if facts.inside else ()) if worker_id is None or f.worker == worker_id),
        key=lambda f: f.at_mono,
    )
    first = None
    for i, f in enumerate(mine):
        if i == 0 or f.pid != mine[i - 1].pid or f.batch < mine[i - 1].batch:
            first = f
    return first


def _as_python(indices: Optional[Tuple[int, ...]]) -> Optional[str]:
    """Sample indices as a Python expression: ``range(a, b)`` when they run consecutively."""
    if not indices:
        return None
    if list(indices) == list(range(indices[0], indices[0] + len(indices))):
        return f"range({indices[0]}, {indices[0] + len(indices)})"
    return repr(list(indices))


def _failing_batch(facts: Facts, worker_id: Optional[int]) -> Optional[Tuple[str, Optional[str], Optional[int]]]:
    """Which batch failed: ``(words, its indices as a Python expression or None, the sample
    index that raised or None)``: from the worker's own record when there is one
    (:func:`_raised_failure`), else from the batch index main waited for, whose samples a
    ``SequentialSampler`` (no shuffling) gives; ``None`` without an inside view."""
    failed = _raised_failure(facts, worker_id)
    if failed is not None:
        shown = list(failed.indices[:16]) if failed.indices else None
        words = f"batch {failed.batch}" + (
            f", samples {shown}{' …' if failed.indices and len(failed.indices) > 16 else ''}" if shown else ""
        )
        if failed.sample is not None and failed.through:
            words += (
                f"; the sample that raised: index {failed.sample} of the dataset that {failed.through} reads "
                "(not of the Dataset the DataLoader was given)"
            )
        elif failed.sample is not None:
            words += f"; the sample that raised: index {failed.sample}"
        words += f" (recorded by worker pid {failed.pid})"
        return words, _as_python(failed.indices), (failed.sample if not failed.through else None)
    main = facts.sample.main
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if main is None or v.pid == main.pid]
    if not views:
        return None
    v = views[-1]
    settings = dict(v.settings)
    size = settings.get("batch_size")
    if settings.get("sampler") == "SequentialSampler" and isinstance(size, int) and size > 0:
        first = v.waiting_idx * size
        return f"batch {v.waiting_idx}, samples {first}–{first + size - 1}", f"range({first}, {first + size})", None
    return (
        f"batch {v.waiting_idx} (the sampler shuffles: log the indices in collate_fn to find its samples)",
        None,
        None,
    )


# Exceptions of a lookup that a Dataset changed in main (a longer list, new keys) raises in a
# worker whose copy is older.
_LOOKUP_ERRORS = ("IndexError", "KeyError")


def _stale_persistent_copy(
    facts: Facts, worker_id: Optional[int], exc_class: str, sample: Optional[int]
) -> Optional[Tuple[str, List[str], str]]:
    """``(summary tail, evidence, remedy)`` when a lookup error (IndexError, KeyError) in a
    worker came in a later epoch of an iterator with ``persistent_workers=True``: those workers
    hold the Dataset as it was when they started (a fork copy, or a pickled one under
    spawn/forkserver; torch/utils/data/dataloader.py keeps them across epochs and only resets
    the sampler, which main runs on its own copy), and an epoch reads every index its sampler
    gives, so the earlier epochs read theirs without this error: main changed the Dataset
    since. The index is said to be past what an earlier epoch read when the counts show it
    (its batches × batch_size). ``None`` otherwise."""
    if not exc_class.endswith(_LOOKUP_ERRORS):
        return None
    failed = _raised_failure(facts, worker_id)
    main = facts.sample.main
    views = [v for v in (facts.inside.loaders if facts.inside else ()) if main is None or v.pid == main.pid]
    view = next((v for v in reversed(views) if failed is not None and failed.pid in v.workers), None)
    view = view or (views[-1] if views and failed is None else None)
    if view is None or view.setting("persistent_workers") is not True or view.epoch < 1:
        return None
    evidence = [
        f"the inside view: the iterator of {view.label} has persistent_workers=True and was in epoch {view.epoch} "
        f"(counted from 0) when it failed: its workers {', '.join(map(str, view.workers))} started before epoch 0 "
        "and hold the Dataset as it was then"
    ]
    size = view.setting("batch_size")
    past = ""
    if failed is not None and isinstance(size, int) and size > 0 and view.batches >= failed.batch:
        earlier = (view.batches - failed.batch) // view.epoch  # batches each earlier epoch delivered
        evidence.append(
            f"each earlier epoch delivered {earlier} batch(es) of at most {size} samples without this error: an epoch "
            "reads every index its sampler gives"
        )
        if sample is not None and earlier and sample >= earlier * size:
            past = f"; index {sample} is past the {earlier * size} samples an earlier epoch read at most"
            evidence[-1] += past
    what = f"dataset[{sample}]" if sample is not None else "the failing index"
    remedy = (
        "The persistent workers hold a stale copy of the Dataset: the one they got when they started (a fork copy; "
        "a pickled one under spawn/forkserver). What main changed since (its length, its list or dict of samples) "
        "does not reach them, while main's sampler already draws indices from the new len"
        + (" (" + past[2:] + ")" if past else "")
        + f". So {what} works in main and fails only in the workers. Recreate the DataLoader after changing the "
        "dataset (a new DataLoader starts new workers with the new copy), or use persistent_workers=False (each "
        "epoch's workers copy it anew); data that must change under running workers belongs in a file or shared "
        "tensor that they read."
    )
    tail = (
        f" in epoch {view.epoch}: the persistent workers hold a stale copy of the Dataset (as it was when they "
        "started), and main's copy has changed since"
    )
    return tail, evidence, remedy


def _worker_exception(facts: Facts, wanted: str) -> Optional[Finding]:
    """An exception raised inside a worker at stage ``wanted`` (:meth:`OriginalTraceback.stage`),
    which PyTorch re-raises in main as "Caught X in DataLoader worker process N" with the
    worker's "Original Traceback" (``ExceptionWrapper`` in torch/_utils.py); the stage picks
    the summary and the way to reproduce it."""
    err = stderr_facts(facts)
    if not err.caught:
        return None
    m = err.caught[-1]
    tb = err.original
    exc = tb.exception if tb else None
    if exc and is_loader_resource_error(exc):
        return None
    stage = tb.stage() if tb else STAGE_DATASET
    if stage != wanted:
        return None
    found = tb.user() if tb else None
    user, source = found if found else (None, "")
    where = f"{frames.short_path(user.file)}:{user.line} in {user.function}" if user else ""
    evidence = [f"stderr: {m.line}"]
    if exc:
        evidence.append(f"stderr (Original Traceback): {exc}")
    if user is not None:
        evidence.append(f"raised at {where}" + (f": `{source}`" if source else ""))
    if stage != STAGE_DATASET:
        evidence.append(f"the worker's traceback runs through PyTorch's call of {stage}, not the Dataset's methods")
    worker_id = m.worker_id
    batch = _failing_batch(facts, worker_id) if stage != STAGE_WORKER_INIT else None
    sample = batch[2] if batch else None
    if batch:
        evidence.append(f"the failing batch (the inside view): {batch[0]}")
    evidence.append(f"worker id {m.worker_id} raised it; main re-raised it and stopped{exit_clause(facts)}")
    hint = ""
    stale = _stale_persistent_copy(facts, worker_id, m.exception, sample) if stage == STAGE_DATASET else None
    if stale is not None:
        evidence += stale[1]
    elif stage == STAGE_DATASET and m.exception.endswith("IndexError"):
        hint = " An IndexError in __getitem__ often means __len__ reports more samples than the Dataset can serve."
    if stale is not None:
        remedy = stale[2]
    elif stage == STAGE_COLLATE:
        remedy = _collate_remedy(batch[1] if batch and batch[1] else "range(batch_size)")
    elif stage == STAGE_DATASET and sample is not None:
        remedy = (
            f"Fix the Dataset code at the location above; the loader itself is fine. Reproduce in one process: "
            f"dataset[{sample}] (the sample that raised), or num_workers=0 to debug it in place."
        )
    else:
        remedy = _STAGE_REMEDY[stage]
    who = "The Dataset" if stage == STAGE_DATASET else stage
    return Finding(
        confidence=0.9 if exc else 0.75,
        summary=f"{who} raised {exc or m.exception}{' at ' + where if where else ''} in DataLoader worker "
        f"{m.worker_id}{f' (sample index {sample})' if sample is not None else ''}; the main process re-raised it"
        + (f"{stale[0]}." if stale is not None else "."),
        evidence=tuple(evidence),
        remedy=remedy + hint,
        pids=(facts.sample.main.pid,) if facts.sample.main else (),
        location=f"{user.file}:{user.line}" if user else err.location,
        docs=(DOC_DATALOADER,),
    )


@rule("dataset_error", SEVERITY_CRASH, 7, CRASH)
def dataset_error(facts: Facts) -> Optional[Finding]:
    """An exception the Dataset raised in a worker (``__getitem__``, ``__getitems__``,
    ``__iter__``): :func:`_worker_exception`."""
    return _worker_exception(facts, STAGE_DATASET)


@rule("collate_error", SEVERITY_CRASH, 7, CRASH)
def collate_error(facts: Facts) -> Optional[Finding]:
    """An exception ``collate_fn`` (PyTorch's ``default_collate`` or the job's) raised in a
    worker while it batched samples that each loaded fine: :func:`_worker_exception`."""
    return _worker_exception(facts, STAGE_COLLATE)


@rule("worker_init_error", SEVERITY_CRASH, 7, CRASH)
def worker_init_error(facts: Facts) -> Optional[Finding]:
    """An exception ``worker_init_fn`` raised as a worker started (``_worker_loop`` calls it
    before any fetch; with ``num_workers=0`` it never runs): :func:`_worker_exception`."""
    return _worker_exception(facts, STAGE_WORKER_INIT)
