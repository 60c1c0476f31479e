"""The records' enums compare by member: two different members are never equal, and each hashes
as its value (a ``dataclass`` decorator on an ``Enum`` made every member equal to every other
through its generated ``__eq__`` on no fields: ``proof.kind in (LOADER_IDLE, WAITS_ON_DEAD)``
held for a kernel proof of workers alone, and ``on_hang: terminate`` ended a job whose main's
stack was unknown before PyTorch's shutdown bound had passed)."""

from __future__ import annotations

import enum

import pytest

from watchdog import types


def _enums():
    return [
        c
        for c in vars(types).values()
        if isinstance(c, type) and issubclass(c, enum.Enum) and c.__module__ == types.__name__ and len(c) > 1
    ]


@pytest.mark.parametrize("kind", _enums(), ids=lambda c: c.__name__)
def test_two_different_members_of_an_enum_are_never_equal(kind):
    members = list(kind)
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            assert a != b, f"{kind.__name__}.{a.name} == {kind.__name__}.{b.name}"
        assert {a: 1} == {a.value: 1}, f"{kind.__name__}.{a.name} does not hash as its value"


def test_a_kernel_proof_is_neither_of_the_arguments_that_end_a_job_whatever_main_does():
    assert types.ProofKind.KERNEL not in (types.ProofKind.LOADER_IDLE, types.ProofKind.WAITS_ON_DEAD)
    assert len({types.ProofKind.KERNEL, types.ProofKind.LOADER_IDLE, types.ProofKind.WAITS_ON_DEAD}) == 3
