"""Ranks as launchers set them (NOTE [ Ranks as launchers set them ] in
watchdog/collect/discovery.py): torchrun's ``RANK`` as it is, Open MPI's and srun's variables
translated, a script that a launcher started again (Lightning's ``strategy="ddp"``) numbered
from ``NODE_RANK`` and ``LOCAL_RANK``, and nothing that is not a decimal integer let through."""

from __future__ import annotations

from watchdog.collect.discovery import (
    SOURCE_OMPI,
    SOURCE_RELAUNCH,
    SOURCE_SLURM,
    derive_rank,
    relaunched,
)
from watchdog.types import RankId
from watchdog.watch.node_loop import describe_rank


def test_torchruns_rank_is_kept_as_set_and_wins_over_an_outer_launchers():
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "SLURM_PROCID": "2", "SLURM_STEP_ID": "0"}
    assert derive_rank(env) == {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}  # srun torchrun …


def test_open_mpi_ranks():
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    got = derive_rank(env)
    assert got == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "RANK_SOURCE": SOURCE_OMPI,
    }


def test_an_srun_task_is_a_rank_and_a_batch_script_is_not():
    task = {
        "SLURM_PROCID": "6",
        "SLURM_LOCALID": "2",
        "SLURM_NODEID": "1",
        "SLURM_NTASKS": "16",
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_STEP_ID": "0",
    }
    got = derive_rank(task)
    assert got == {"RANK": "6", "LOCAL_RANK": "2", "GROUP_RANK": "1", "WORLD_SIZE": "8", "RANK_SOURCE": SOURCE_SLURM}
    # the batch script's own environment: SLURM_PROCID 0 and no step id
    assert derive_rank({"SLURM_PROCID": "0", "SLURM_NTASKS": "16"}) is None


def test_a_script_started_again_as_lightning_does_is_numbered_by_node_and_local_rank():
    child = {"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}
    assert relaunched(child)
    got = derive_rank(child)
    assert got == {"RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "WORLD_SIZE": "2", "RANK_SOURCE": SOURCE_RELAUNCH}
    # node 1 of a 2 x 4 job: its local rank 3 is rank 7, once the node's local ranks are counted
    node1 = {"LOCAL_RANK": "3", "NODE_RANK": "1", "WORLD_SIZE": "8"}
    assert derive_rank(node1) is None  # not counted yet: no number is better than a wrong one
    assert (derive_rank(node1, local_world=4) or {}).get("RANK") == "7"
    assert (derive_rank({**node1, "LOCAL_WORLD_SIZE": "4"}) or {}).get("RANK") == "7"
    # LOCAL_RANK alone names no rank (a user's variable, or a launcher this does not know)
    assert derive_rank({"LOCAL_RANK": "1"}) is None


def test_the_log_says_where_a_rank_came_from_and_a_helper_is_no_rank():
    assert describe_rank(RankId.of({"RANK": "1", "WORLD_SIZE": "2"}), 42) == "rank 1 of 2 (pid 42)"
    slurm = describe_rank(RankId.of({"RANK": "1", "WORLD_SIZE": "2", "RANK_SOURCE": SOURCE_SLURM}), 42)
    assert slurm.startswith("rank 1 of 2 (pid 42; from SLURM_PROCID")
    from watchdog.collect.discovery import SOURCE_HELPER

    helper = describe_rank(RankId.of({"RANK": "child42", "RANK_SOURCE": SOURCE_HELPER}), 42)
    assert helper.startswith("process 42 (") and "rank" not in helper.split("(")[0]
