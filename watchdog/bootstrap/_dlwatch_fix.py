"""The fix of a ``dlwatch verify`` run, applied inside the job with no edit to its code.

``dlwatch verify`` sets ``DLWATCH_APPLY`` to a JSON object for the runs that get the fix:
``loader`` (``DataLoader`` settings, by their names in torch/utils/data/dataloader.py:
``multiprocessing_context`` as a start method name, ``num_workers``, ``timeout``,
``pin_memory``, ``prefetch_factor``, ``persistent_workers``), ``sharing_strategy`` (given to
``torch.multiprocessing.set_sharing_strategy``), ``worker_threads`` (each worker's intra-op
threads, ``torch.set_num_threads(n)`` after the job's own ``worker_init_fn``: PyTorch sets 1 in
each worker before calling it, torch/utils/data/_utils/worker.py, and a job's
``worker_init_fn`` may raise it again), and which loaders: ``sites`` (``file:line``
where the report saw the loader iterated or created) or ``all_loaders``. The recorder
(``_dlwatch_inside.install``) calls :func:`apply` once ``torch.utils.data.dataloader`` is
loaded.

How: each changed setting becomes a data descriptor of ``DataLoader`` (the recorder's way, no
wrapper function, so no frame of ours is in any traceback). Its setter stores what the job
sets, as the attribute would (``multiprocessing_context`` through PyTorch's own property, which
checks it); its getter answers the fixed value for a loader at one of ``sites`` (where the
loader was created, or where the code that reads the setting was called from: the ``for``
line that creates the iterator) and the job's own value for every other loader. A loader once
answered the fixed value keeps it, so one iterator never sees a mix. ``worker_threads`` is such
a descriptor on ``worker_init_fn``: a fixed loader answers :class:`ThreadsAfterInit` wrapping the
job's own function, which the iterator hands to each worker (pickled with it under ``spawn``
and ``forkserver``: this module is importable there, as the recorder is).

Standard library only, like the recorder.
"""

import json
import os
import sys

ENV_APPLY = "DLWATCH_APPLY"
SETTINGS = ("multiprocessing_context", "num_workers", "timeout", "pin_memory", "prefetch_factor", "persistent_workers")
_BOOTSTRAP = os.path.dirname(os.path.abspath(__file__)) + os.sep  # this file's and the recorder's folder
_SITE = "_dlwatch_fix_site"  # where a loader was created (its first setting stored), in its __dict__
_FIXED = "_dlwatch_fix_applied"  # set once a loader answered a fixed value


def plan():
    """The fix requested in ``DLWATCH_APPLY`` (a dict), or ``None`` when there is none.

    Raises:
        ValueError: the variable is not a JSON object.
    """
    text = os.environ.get(ENV_APPLY)
    if not text:
        return None
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("%s is not a JSON object" % ENV_APPLY)
    return doc


def _site(frame, torch_dir):
    """``file:line`` of the innermost frame outside torch and dlwatch's bootstrap, or ``None``."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not (torch_dir and name.startswith(torch_dir)) and not name.startswith(_BOOTSTRAP):
            return "%s:%d" % (name, frame.f_lineno)
        frame = frame.f_back
    return None


class _Fixed(object):
    """One ``DataLoader`` setting that the fix changes (see the module docstring)."""

    def __init__(self, name, value, original, chooser, compute=None):
        self.name, self.value, self.original, self.chooser = name, value, original, chooser
        self.compute = compute  # value(loader), instead of the one value

    def __get__(self, loader, owner=None):
        if loader is None:
            return self
        if self.chooser(loader, sys._getframe(1)):
            return self.compute(loader) if self.compute is not None else self.value
        if self.original is not None:
            return self.original.__get__(loader, owner)
        try:
            return loader.__dict__[self.name]
        except KeyError:
            raise AttributeError("%r object has no attribute %r" % (type(loader).__name__, self.name)) from None

    def __set__(self, loader, value):
        self.chooser.created(loader, sys._getframe(1))
        if self.original is not None:
            self.original.__set__(loader, value)
        else:
            loader.__dict__[self.name] = value


class _Chooser(object):
    """Which loaders get the fix: every one (``everywhere``) or those at one of ``sites``."""

    def __init__(self, sites, everywhere, torch_dir):
        self.sites, self.everywhere, self.torch_dir = frozenset(sites), everywhere, torch_dir

    def created(self, loader, frame):
        if _SITE not in loader.__dict__:
            loader.__dict__[_SITE] = _site(frame, self.torch_dir)

    def __call__(self, loader, frame):
        state = loader.__dict__
        if state.get(_FIXED):
            return True
        if self.everywhere or state.get(_SITE) in self.sites or _site(frame, self.torch_dir) in self.sites:
            state[_FIXED] = True
            return True
        return False


def apply(module, torch_dir, doc):
    """Apply the fix ``doc`` (:func:`plan`) to ``module`` (``torch.utils.data.dataloader``,
    loaded); ``torch_dir`` is torch's package folder, with a trailing separator.

    Raises:
        ValueError: a setting outside ``SETTINGS``, or a sharing strategy this torch lacks.
    """
    loader_fix = doc.get("loader") or {}
    wrong = [k for k in loader_fix if k not in SETTINGS]
    if wrong:
        raise ValueError("not a DataLoader setting a fix may change: %s" % ", ".join(wrong))
    strategy = doc.get("sharing_strategy")
    if strategy:
        import torch.multiprocessing as mp  # loaded with torch.utils.data.dataloader: no new import

        if strategy not in mp.get_all_sharing_strategies():
            raise ValueError("sharing strategy %r is not one of this torch's" % (strategy,))
        mp.set_sharing_strategy(strategy)
    threads = doc.get("worker_threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError("worker_threads is not a positive integer: %r" % (threads,))
    cls = module.DataLoader
    chooser = _Chooser(doc.get("sites") or (), bool(doc.get("all_loaders")), torch_dir)
    if threads is not None:

        def init(loader):
            return ThreadsAfterInit(loader.__dict__.get("worker_init_fn"), threads)

        cls.worker_init_fn = _Fixed("worker_init_fn", None, None, chooser, compute=init)
    for name, value in loader_fix.items():
        original = cls.__dict__.get(name)  # the property of multiprocessing_context; None for plain attributes
        if name == "multiprocessing_context" and isinstance(value, str):
            value = _context(value)
        setattr(cls, name, _Fixed(name, value, original if hasattr(original, "__set__") else None, chooser))
    workers = loader_fix.get("num_workers")
    if workers and "prefetch_factor" not in loader_fix:
        # A loader that had no workers has prefetch_factor None, which workers cannot use.
        original = cls.__dict__.get("prefetch_factor")

        def prefetch(loader):
            own = loader.__dict__.get("prefetch_factor")
            return 2 if own is None else own

        cls.prefetch_factor = _Fixed("prefetch_factor", None, original, chooser, compute=prefetch)
    return doc


class ThreadsAfterInit(object):
    """A worker's ``worker_init_fn`` under the fix: the job's own (``own``, or none), then
    ``torch.set_num_threads(threads)``. Picklable when ``own`` is (``spawn``, ``forkserver``)."""

    def __init__(self, own, threads):
        self.own, self.dlwatch_worker_threads = own, threads

    def __call__(self, worker_id):
        if self.own is not None:
            self.own(worker_id)
        import torch  # loaded in every DataLoader worker

        torch.set_num_threads(self.dlwatch_worker_threads)


def _context(method):
    """A start method's context, as ``DataLoader``'s own setter makes it (torch.multiprocessing)."""
    import torch.multiprocessing as mp

    return mp.get_context(method)
