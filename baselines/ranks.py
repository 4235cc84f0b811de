"""A baseline as one process per GPU (fsdp-offload at N >= 2, zero-offload at every N): spawning the ranks,
what they share (the gather of per-rank values, the host's cores), and how one rank's failure ends them all.

A rank that fails must not wait for its peers, nor they for it: a peer may sit in a collective the failed
rank never joins, and on NCCL both would wait for ever (docs/performance.md entry 64). So a failed rank
leaves its status and message in a folder the parent made and ends at once, without teardown; torch's
spawn then ends the others, and the parent records the run from what the rank left.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Callable

import torch

from baselines.common import RankFailed, Settings, failure_status, status_only
from harmony.jsonio import DEFERRED_EXIT, Deferred

RANK_FAILED_EXIT = 76      # a rank failed: its status and message are in the spawn's failures folder


def spawn_ranks(entry: Callable, args: tuple, gpus: int) -> None:
    """One process per GPU (torch.multiprocessing.spawn, joined) for fsdp-offload at N >= 2 and zero-offload
    at every N (entry 116). At N >= 2 the ranks step their CPU optimizers at the same time, so they wait
    passively as Harmony's workers do (docs/performance.md entry 19); each rank calls
    `use_rank_share_of_cores` first."""
    import tempfile

    import torch.multiprocessing as mp
    from harmony.runtime.launch import worker_omp_wait_policy
    if gpus > 1:    # one rank (zero-offload at N = 1) shares the cores with no one: OpenMP's default stands
        os.environ["OMP_WAIT_POLICY"] = worker_omp_wait_policy()
    with tempfile.TemporaryDirectory(prefix="harmony-ranks-") as failures:
        try:
            mp.spawn(_rank_main, args=(entry, args, failures), nprocs=gpus, join=True)
        except mp.ProcessExitedException as e:
            if e.exit_code == DEFERRED_EXIT:      # the ranks left the run for the next call (train_loop)
                raise Deferred(f"rank {e.error_index} left the run for the next call (its log says why)") from None
            if e.exit_code == RANK_FAILED_EXIT:
                said = json.loads(Path(failures, f"rank{e.error_index}.json").read_text())
                raise RankFailed(said["status"], said["message"]) from None
            raise


def failed_ranks_record(s: Settings, model_name: str, e: Exception) -> dict:
    """The record of a spawn of ranks that failed with `e`: a rank's RankFailed as it said (oom, infeasible,
    error), else an error that names what ended the rank (a signal: the host's OOM killer, say)."""
    if isinstance(e, RankFailed):
        return status_only(s, model_name, e.status, e.message)
    return status_only(s, model_name, "error", f"a rank failed: {str(e).strip() or type(e).__name__}")


def _rank_main(rank: int, entry: Callable, args: tuple, failures: str) -> None:
    """A spawned rank: runs entry(rank, *args). A Deferred (every rank decides it at the same iteration,
    train_loop) ends the rank with exit status DEFERRED_EXIT, which spawn_ranks turns back into Deferred in
    the parent: an exception raised in a rank reaches the parent only as text. Any other exception prints
    its traceback to the run's log, leaves the status and message the run is recorded with in `failures`
    (a RankFailed's own, else oom or error by the exception) and ends the rank with RANK_FAILED_EXIT. Both
    end the process without interpreter teardown: its peers may sit in a collective it never joins, and
    a process group torn down under them can wait as long. A rank that finishes ends the same way, with
    status 0."""
    try:
        entry(rank, *args)
    except Deferred as e:
        print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(DEFERRED_EXIT)
    except Exception as e:  # noqa: BLE001 - every failure becomes the run's record
        traceback.print_exc(file=sys.stderr)
        if not isinstance(e, RankFailed):
            first = (str(e).strip().splitlines() or [""])[0][:300]
            e = RankFailed(failure_status(e), f"rank {rank}, {type(e).__name__}: {first}")
        Path(failures, f"rank{rank}.json").write_text(json.dumps({"status": e.status, "message": e.message}))
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(RANK_FAILED_EXIT)
    # Done: the rank has written what it writes (records are flushed per line and closed, the process group
    # destroyed), so it ends without interpreter teardown too. Teardown only runs the libraries' destructors,
    # and one of them at times aborted a rank after its last iteration with "terminate called without an
    # active exception" (docs/runtime.md; 3 of about 100 CPU runs of fsdp-offload at N = 2, CI included),
    # which failed a run whose training had finished.
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(0)


def rank_gather(gpus: int) -> Callable[[list], list] | None:
    """train_loop's `gather` for a system of `gpus` spawned ranks: every rank's values, rank by rank
    (all_gather_object over the default process group); None for one rank."""
    if gpus == 1:
        return None
    import torch.distributed as dist

    def gather(values: list) -> list:
        out: list = [None] * gpus
        dist.all_gather_object(out, values)
        return [v for per in out for v in (per if isinstance(per, list) else [per])]
    return gather


def use_rank_share_of_cores(gpus: int) -> None:
    """A spawned rank's intra-op threads: the host's cores divided among the ranks (DeepSpeed's CPU Adam
    included), as for Harmony's workers."""
    from harmony.runtime import default_worker_threads
    torch.set_num_threads(default_worker_threads(gpus))
