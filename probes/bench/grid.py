"""Benchmark configurations: parsing the grid flags and expanding them."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Callable, List, Tuple

START_METHODS = ("fork", "spawn", "forkserver")


class GridError(Exception):
    """A grid flag's value is malformed; the message names the flag."""


@dataclass(frozen=True)
class LoaderConfig:
    """One DataLoader configuration (PyTorch's argument names)."""

    num_workers: int
    pin_memory: bool
    batch_size: int
    prefetch_factor: int
    persistent_workers: bool
    multiprocessing_context: str

    def label(self) -> str:
        """``W=4 pin=on bs=128 pf=2 persist=off fork``."""
        return (
            f"W={self.num_workers} pin={'on' if self.pin_memory else 'off'} bs={self.batch_size} "
            f"pf={self.prefetch_factor} persist={'on' if self.persistent_workers else 'off'} "
            f"{self.multiprocessing_context}"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def _parse_list(flag: str, text: str, item: Callable[[str], object], unique: bool = True) -> Tuple:
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            out.append(item(part))
        except ValueError:
            raise GridError(f"{flag}: bad value {part!r} in {text!r}") from None
    if not out:
        raise GridError(f"{flag}: empty list")
    return tuple(dict.fromkeys(out)) if unique else tuple(out)


TRUE_WORDS = ("true", "on", "1", "yes")
FALSE_WORDS = ("false", "off", "0", "no")


def _bool(text: str) -> bool:
    low = text.lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError(text)


def _nonneg_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise ValueError(text)
    return v


def _pos_int(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise ValueError(text)
    return v


def _method(text: str) -> str:
    if text not in START_METHODS:
        raise ValueError(text)
    return text


def expand(
    num_workers: str, pin_memory: str, batch_size: str, prefetch_factor: str, persistent_workers: str, context: str
) -> List[LoaderConfig]:
    """Every combination of the comma lists (the flags' text), in flag order.

    Raises:
        GridError: naming the flag whose list is malformed.
    """
    lists = (
        _parse_list("--num-workers", num_workers, _nonneg_int),
        _parse_list("--pin-memory", pin_memory, _bool),
        _parse_list("--batch-size", batch_size, _pos_int),
        _parse_list("--prefetch-factor", prefetch_factor, _pos_int),
        _parse_list("--persistent-workers", persistent_workers, _bool),
        _parse_list("--multiprocessing-context", context, _method),
    )
    return [LoaderConfig(*combo) for combo in itertools.product(*lists)]


def parse_shape(text: str) -> Tuple[int, ...]:
    """``3,224,224`` -> ``(3, 224, 224)``.

    Raises:
        GridError: naming ``--sample-shape``.
    """
    return _parse_list("--sample-shape", text, _pos_int, unique=False)
