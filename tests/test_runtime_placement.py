"""Issue 22, acceptance 1: which device and backend every collective uses, checked without a GPU.

The choices are pure functions (:mod:`gnnflow.runtime.devices`), tested here for CUDA.  The
strategies are then run with 2 ranks on CPU with ``GNNFLOW_PLACEMENT_LOG`` set: every collective
logs its call site and the kind of its tensors (host bookkeeping or compute payload).  Each site
must use the kind ``SITES`` gives it (so a site that sends bookkeeping through the payload path,
or a payload through the host, fails here), its tensors must be on the device the selection gives
for a CPU run, and under the CUDA mapping (``cpu:gloo,cuda:nccl``, rank r on ``cuda:r``) the kind
must land host bookkeeping on gloo and payload on NCCL on the rank's own GPU.  A static check
keeps every tensor collective of ``src/`` behind the checked wrappers.

Ranks sharing one GPU are simulated the same way: under ``rank_device(r, "cuda", 1)`` and
``SHARED_GPU_BACKEND`` every payload lands on ``cuda:0`` over gloo, and the point-to-point
payload sites are the ones staged through host copies.  DGCL is run once more with
``GNNFLOW_STAGE_ON_HOST=1``, which takes that staging path on the CPU: its host copies must be
logged as host tensors staging a payload site, and the run must give the unstaged run's records.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import assert_records_match, unmeasured_records

from gnnflow.runtime import devices
from gnnflow.runtime.devices import (
    COMPUTE,
    CUDA_BACKEND,
    HOST,
    SHARED_GPU_BACKEND,
    PlacementError,
    backend_for,
    default_backend,
    placement_device,
    placement_problem,
    rank_device,
    stages_through_host,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "gnnflow"
STAGED = "dgcl+staged"  # DGCL again, its point-to-point payloads staged through host copies

# call site -> kind of its tensors, for the collectives the runs below make
SITES = {
    # bookkeeping: counts, plans, ids, degrees, evaluation sums, halo lists -> host (gloo)
    "gnnflow.comm.collectives:exchange_counts": HOST,
    "gnnflow.comm.collectives:exchange_rows_in_rounds": HOST,  # the CPU feature store's rows
    "gnnflow.comm.collectives:part_degrees": HOST,
    "gnnflow.strategies.minibatch.feature_store:FeatureStore._exchange": HOST,
    "gnnflow.strategies.minibatch.sampler:DistNeighborSampler.sample_edges": HOST,  # typed books too
    "gnnflow.strategies.hec.use:expected_use": HOST,  # read rates, cache sizes
    "gnnflow.strategies.hec.use:fill_static": HOST,  # layer-0 rows from the host feature store
    "gnnflow.strategies.minibatch.inference:max_over_ranks": HOST,
    "gnnflow.strategies.minibatch.sampler:DistNeighborSampler._reply": HOST,
    "gnnflow.strategies.split.sampling:sp_sample": HOST,
    "gnnflow.strategies.hec.push:exchange_halo_ids": HOST,
    "gnnflow.strategies.minibatch.base:MiniBatchStrategy._plan_batches": HOST,
    "gnnflow.strategies.metrics:reduce_sums": HOST,
    "gnnflow.strategies.split.split_parallel:SplitParallel.group_split_metrics": HOST,
    "gnnflow.strategies.fullbatch.row1d:global_out_degrees": HOST,
    "gnnflow.strategies.fullbatch.row1d:FullBatch.prepare": HOST,
    # payload: parameters, gradients, activations, embeddings, SpMM operands -> compute (NCCL)
    "gnnflow.strategies.minibatch.base:MiniBatchStrategy.build_model": COMPUTE,
    "gnnflow.comm.collectives:all_reduce_gradients": COMPUTE,
    "gnnflow.comm.collectives:AllToAllRows.backward": COMPUTE,
    "gnnflow.strategies.split.p3:PushPull.compute_loss": COMPUTE,
    "gnnflow.strategies.split.split_parallel:sp_forward": COMPUTE,
    "gnnflow.strategies.hec.push:EmbeddingPush._push": COMPUTE,
    "gnnflow.strategies.fullbatch.spmm:BroadcastSpMM.__call__.<locals>.start": COMPUTE,
    "gnnflow.comm.allgather:_exchange": COMPUTE,
}


# ------------------------------------------------------------------ the pure selection functions
def test_backend_for_cuda_runs():
    assert default_backend("cpu") == "gloo"
    assert default_backend("cuda") == CUDA_BACKEND == "cpu:gloo,cuda:nccl"
    assert default_backend("cuda", ranks_per_gpu=2) == "cpu:gloo,cuda:gloo"  # NCCL: one rank per GPU
    assert backend_for("cpu", CUDA_BACKEND) == "gloo"
    assert backend_for(torch.device("cuda", 1), CUDA_BACKEND) == "nccl"
    assert backend_for("cuda:0", "gloo") == "gloo"
    with pytest.raises(PlacementError, match="cpu tensors"):
        backend_for("cpu", "nccl")  # the bug of issue 22: bookkeeping on a plain NCCL group


def test_point_to_point_payloads_are_staged_where_ranks_share_a_gpu(monkeypatch):
    monkeypatch.delenv(devices.STAGE_ON_HOST_ENV, raising=False)
    assert stages_through_host("cuda:0", SHARED_GPU_BACKEND)  # gloo sends host memory only
    assert not stages_through_host("cuda:0", CUDA_BACKEND)  # NCCL sends device memory
    assert not stages_through_host("cpu", SHARED_GPU_BACKEND)
    assert not stages_through_host("cpu", "gloo")
    assert not stages_through_host("cuda:0", None)  # no group: nothing is sent
    monkeypatch.setenv(devices.STAGE_ON_HOST_ENV, "1")
    assert stages_through_host("cpu", "gloo")  # the shared-GPU path, taken on a CPU run


def test_rank_device_is_the_local_rank(monkeypatch):
    assert [rank_device(r, "cuda", 4) for r in range(4)] == [torch.device("cuda", r) for r in range(4)]
    assert rank_device(3, "cuda", 2) == torch.device("cuda", 1)  # more ranks than GPUs: shared
    assert rank_device(1, "cpu", 0) == torch.device("cpu")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    assert devices.local_rank(5) == 5
    monkeypatch.setenv("SLURM_LOCALID", "2")
    assert devices.local_rank(5) == 2
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert devices.local_rank(5) == 1


def test_placement_problems_on_a_cuda_rank():
    gpu1 = torch.device("cuda", 1)
    assert placement_device(HOST, gpu1) == torch.device("cpu")
    assert placement_device(COMPUTE, gpu1) == gpu1
    assert placement_problem(HOST, "cpu", gpu1, CUDA_BACKEND) is None
    assert placement_problem(COMPUTE, "cuda:1", gpu1, CUDA_BACKEND) is None
    assert "expected cuda:1" in placement_problem(COMPUTE, "cuda:0", gpu1, CUDA_BACKEND)  # rank 0's GPU
    assert "expected cuda:1" in placement_problem(COMPUTE, "cpu", gpu1, CUDA_BACKEND)  # payload on host
    assert "expected cpu" in placement_problem(HOST, "cuda:1", gpu1, CUDA_BACKEND)  # bookkeeping on GPU
    assert "cpu tensors" in placement_problem(HOST, "cpu", gpu1, "nccl")
    with pytest.raises(ValueError):
        placement_device("features")


def test_every_tensor_collective_goes_through_the_checked_wrappers():
    raw = re.compile(r"\bdist\.(all_reduce|all_gather|all_gather_into_tensor|broadcast|all_to_all\w*|reduce\w*|"
                     r"scatter|gather|send|recv|isend|irecv|batch_isend_irecv)\(")
    wrappers = SRC / "comm" / "collectives.py"
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if p != wrappers
                 for i, line in enumerate(p.read_text().splitlines(), 1) if raw.search(line)]
    assert not offenders, f"collectives outside gnnflow.comm.collectives's checked wrappers: {offenders}"


# ------------------------------------------------------------------ every site of the real strategies
@pytest.fixture(scope="module")
def placement_log(tmp_path_factory):
    """The collectives of 2-rank CPU runs of every distributed strategy, one record per call."""
    from conftest import random_store_arrays

    from gnnflow.config import TrainConfig
    from gnnflow.data.store import write_store
    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.driver import run_training

    tmp = tmp_path_factory.mktemp("placement")
    store = write_store(tmp / "g", name="g", source="test", directed=False, **random_store_arrays())
    book = partition_graph(store.path, "metis", 2, tmp / "book", seed=0)
    log_dir = tmp / "log"
    mp = pytest.MonkeyPatch()
    mp.setenv(devices.PLACEMENT_LOG_ENV, str(log_dir))  # inherited by the spawned ranks
    common = dict(graph=str(store.path), partition=str(book.path), workers=2, hidden=8, num_layers=2,
                  fanouts=[3, 3], batch_size=64, epochs=1, seed=0)
    runs = {"data": {}, "split": {}, "p3": {}, "hec": {},
            "fullbatch": dict(model="gcn", fanouts=[-1, -1]), "dgcl": dict(model="gcn", fanouts=[-1, -1])}
    records = []
    try:
        for name in [*runs, STAGED]:
            strategy = name.partition("+")[0]
            if name == STAGED:  # the point-to-point staging of ranks sharing a GPU, on the CPU
                mp.setenv(devices.STAGE_ON_HOST_ENV, "1")
            run_training(TrainConfig(**{**common, **runs[strategy]}, strategy=strategy, out=str(tmp / name)))
            mp.delenv(devices.STAGE_ON_HOST_ENV, raising=False)
            for f in sorted(log_dir.glob("rank*.jsonl")):
                records += [dict(json.loads(line), strategy=name, rank=int(f.stem[4:]))
                            for line in f.read_text().splitlines()]
                f.unlink()
    finally:
        mp.undo()
    return records, {name: unmeasured_records(tmp / name) for name in ("dgcl", STAGED)}


@pytest.mark.slow
def test_every_collective_site_uses_the_device_of_its_kind(placement_log):
    placement_log = [rec for rec in placement_log[0] if "staged" not in rec]
    assert placement_log
    seen: dict[str, set[str]] = {}
    for rec in placement_log:
        seen.setdefault(rec["site"], set()).add(rec["kind"])
    unknown = sorted(set(seen) - set(SITES))
    assert not unknown, f"collective sites with no declared kind (add them to SITES): {unknown}"
    wrong = {s: sorted(k) for s, k in seen.items() if k != {SITES[s]}}
    assert not wrong, f"sites whose tensors changed kind (bookkeeping must stay on the host): {wrong}"
    for rec in placement_log:
        # a CPU run: the selection puts every kind on the host, over gloo
        assert rec["devices"] in ([], ["cpu"]), rec
        assert rec["backend"] == "gloo", rec
        # the same call on a CUDA run: rank r's payload on cuda:r over NCCL, bookkeeping over gloo
        gpu = rank_device(rec["rank"], "cuda", 2)
        want = placement_device(rec["kind"], gpu)
        assert backend_for(want, CUDA_BACKEND) == ("gloo" if rec["kind"] == HOST else "nccl")
        assert want.type == "cpu" or want.index == rec["rank"]
    strategies = {rec["strategy"] for rec in placement_log}
    assert strategies == {"data", "split", "p3", "hec", "fullbatch", "dgcl", STAGED}
    assert set(seen) == set(SITES), f"declared sites these runs no longer reach: {set(SITES) - set(seen)}"


@pytest.mark.slow
def test_ranks_sharing_one_gpu_stage_point_to_point_payloads_on_the_host(placement_log):
    log, records = placement_log
    shared = [rec for rec in log if rec["strategy"] != STAGED]
    for rec in shared:
        # both ranks on cuda:0 (one GPU), every tensor over gloo; gloo's collectives stage CUDA
        # tensors themselves, its point-to-point ops do not: those payloads are staged by us
        gpu = rank_device(rec["rank"], "cuda", 1)
        want = placement_device(rec["kind"], gpu)
        assert want == (torch.device("cuda", 0) if rec["kind"] == COMPUTE else torch.device("cpu")), rec
        assert backend_for(want, SHARED_GPU_BACKEND) == "gloo"
        # a payload (on the shared GPU) would be staged, were it sent point to point
        assert stages_through_host(want, SHARED_GPU_BACKEND) == (rec["kind"] == COMPUTE), rec
    staged = [rec for rec in log if rec["strategy"] == STAGED and "staged" in rec]
    assert staged, "the staged run logged no host copies"
    for rec in staged:  # the host copies are declared host tensors carrying a payload site's rows
        assert rec["kind"] == HOST and rec["staged"] == COMPUTE == SITES[rec["site"]], rec
        assert rec["op"] == "batch_isend_irecv" and rec["devices"] in ([], ["cpu"]), rec
    staged_sites = {rec["site"] for rec in staged}
    p2p_sites = {rec["site"] for rec in shared if rec["op"] == "batch_isend_irecv" and rec["kind"] == COMPUTE}
    assert staged_sites == p2p_sites == {"gnnflow.comm.allgather:_exchange"}
    # staged or not, the exchange delivers the same rows: the runs' records are equal
    assert_records_match(records[STAGED], records["dgcl"], ignore=("run_id",))
