"""Data-correctness warnings, from the inside view (``watchdog/bootstrap/_dlwatch_inside.py``):
the job runs, but its workers feed it the wrong data. Nothing a ``/proc`` sampler sees.
They fire while the job runs (``live``) and after it ended (``exit``, ``crash``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from ..types import MODE_CRASH, MODE_EXIT, MODE_LIVE, SEVERITY_WARNING, Facts, RngCheck
from .engine import Finding, rule

DATA = (MODE_LIVE, MODE_EXIT, MODE_CRASH)
DOC_ITERABLE = "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset"
DOC_RANDOMNESS = "https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading"


def _records(digest: str) -> Optional[int]:
    """How many records a first-records digest covers (``<digest>/<records>``, the recorder's
    ``_first_batch``), or ``None`` from an older recorder (its first batch only)."""
    _, sep, n = digest.rpartition("/")
    return int(n) if sep and n.isdigit() else None


@rule("iterable_replicated", SEVERITY_WARNING, 56, DATA)
def iterable_replicated(facts: Facts) -> Optional[Finding]:
    """An ``IterableDataset`` with several workers whose workers' streams begin identically: each
    worker runs its own copy of ``__iter__``, so without sharding by ``get_worker_info()`` every
    worker replays the whole stream and each record is seen ``num_workers`` times (PyTorch's
    IterableDataset documentation; pytorch/pytorch#30599). Judged on each worker's first
    ``FIRST_RECORDS`` records (or its whole stream when shorter), as the recorder digests them
    (``watchdog/bootstrap/_dlwatch_inside.py``): streams sharded per worker that only begin alike
    (PyTorch's ``WorkerSpecificIterableDataset``, a shared header record) differ within them, and
    a worker that yielded nothing has no digest and is never named."""
    if facts.inside is None:
        return None
    for v in facts.inside.loaders:
        groups: Dict[str, List[int]] = defaultdict(list)
        for worker, digest in v.first_batches:
            if _records(digest) != 0:  # a stream with no record replicates nothing
                groups[digest].append(worker)
        same = max(groups.values(), key=len, default=[])
        if len(same) < 2:
            continue
        n = v.setting("num_workers")
        digest = next(d for d, ws in groups.items() if ws == same)
        records = _records(digest)
        what = f"first {records} records" if records is not None else "first batch"
        pids = [v.workers[w] for w in same if 0 <= w < len(v.workers)]
        return Finding(
            confidence=0.85,
            summary=(
                f"Every worker of the IterableDataset {v.dataset_type} replays the same stream: workers "
                f"{', '.join(map(str, same))} delivered the same {what}, so each record reaches training up to "
                f"{n} times per epoch."
            ),
            evidence=(
                f"{v.label}: IterableDataset {v.dataset_type}, num_workers={n}",
                f"workers {', '.join(map(str, same))}: one digest, {digest.split('/')[0]}, of their {what} "
                "(shapes, dtypes and values of every tensor, sampled across its records)",
                f"{v.batches} batches delivered so far, epoch {v.epoch}",
            ),
            remedy=(
                "Shard the stream by worker in __iter__: info = torch.utils.data.get_worker_info(); yield only the "
                "records with index % info.num_workers == info.id (or split the file/shard list the same way); or set "
                "num_workers=1."
            ),
            pids=tuple(pids) or (v.pid,),
            location=f"{v.site.file}:{v.site.line}" if v.site else None,
            docs=(DOC_ITERABLE,),
        )
    return None


def _duplicated(checks: List[RngCheck]) -> List[Tuple[str, List[RngCheck]]]:
    """``(generator, workers)`` for each generator that several workers of one loader started
    with in the same state and all drew from (its state changed by the later look)."""
    out = []
    names = {k for c in checks for k, _ in c.start}
    for name in sorted(names):
        groups: Dict[str, List[RngCheck]] = defaultdict(list)
        for c in checks:
            start, later = dict(c.start), dict(c.later)
            if name in start and name in later and later[name] != start[name]:
                groups[start[name]].append(c)
        same = max(groups.values(), key=len, default=[])
        if len(same) >= 2:
            out.append((name, same))
    return out


@rule("rng_duplicated", SEVERITY_WARNING, 57, DATA)
def rng_duplicated(facts: Facts) -> Optional[Finding]:
    """Workers that draw the same random numbers: a generator (``random``'s or numpy's global
    one, or a ``random.Random``/numpy ``Generator``/``torch.Generator`` the Dataset holds) was
    in the same state in several workers when they started fetching, and each drew from it.
    PyTorch seeds ``random``, ``torch`` and numpy's global generator per worker
    (``_worker_loop`` in torch/utils/data/_utils/worker.py), so a generator the Dataset created
    in ``__init__`` is copied identically into every worker, and a ``worker_init_fn`` that
    reseeds with a constant undoes PyTorch's seeding: identical random augmentations."""
    if facts.inside is None or not facts.inside.rng:
        return None
    by_loader: Dict[Tuple[int, int], List[RngCheck]] = defaultdict(list)
    for c in facts.inside.rng:
        by_loader[(c.ppid, c.num_workers)].append(c)
    found = []
    for checks in by_loader.values():
        found += _duplicated(checks)
    if not found:
        return None
    name, same = found[0]
    ids = ", ".join(str(c.worker_id) for c in sorted(same, key=lambda c: c.worker_id))
    evidence = [
        f"{g}: workers {', '.join(str(c.worker_id) for c in sorted(ws, key=lambda c: c.worker_id))} "
        f"(pids {', '.join(str(c.pid) for c in ws)}) started in the same state and drew from it"
        for g, ws in found[:4]
    ]
    globals_only = all("(global)" in g for g, _ in found)
    if globals_only:
        evidence.append(
            "PyTorch seeds random, torch and numpy's global generators differently in each worker; these were equal "
            "after worker_init_fn, which must reseed them"
        )
    else:
        evidence.append(
            "PyTorch seeds only the global generators per worker (seed = base_seed + worker id); a generator the "
            "Dataset holds keeps the state it had when the workers were created"
        )
    remedy = (
        "Do not reseed the global generators with a constant in worker_init_fn; derive any seed from "
        "torch.utils.data.get_worker_info().seed (or torch.initial_seed()), which differs per worker."
        if globals_only
        else "Create the Dataset's generator in each worker: in worker_init_fn, info = "
        "torch.utils.data.get_worker_info(); info.dataset.rng = numpy.random.default_rng(info.seed) (or lazily in "
        "__getitem__), instead of in __init__, which every worker copies in the same state."
    )
    return Finding(
        confidence=0.8,
        summary=f"DataLoader workers {ids} draw identical random numbers from {name}: their random augmentations "
        "repeat across workers.",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=tuple(c.pid for c in same),
        docs=(DOC_RANDOMNESS,),
    )
