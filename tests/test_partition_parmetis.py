"""ParMETIS (or PT-Scotch's ParMETIS layer) under mpirun -np 2 (acceptance 3)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gnnflow.errors import GnnflowError
from gnnflow.partition.api import partition_graph


def _have_parmetis() -> bool:
    if shutil.which("mpirun") is None:
        return False
    try:
        import mpi4py  # noqa: F401

        from gnnflow.partition.parmetis import find_library

        find_library(32)
    except (ImportError, GnnflowError):
        return False
    return True


needs_mpi = pytest.mark.skipif(not _have_parmetis(), reason="needs mpirun, mpi4py and a ParMETIS library")


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from gnnflow.data.synthetic import prepare_synthetic

    return prepare_synthetic(tmp_path_factory.mktemp("g") / "s", num_nodes=8000, avg_degree=10, feature_dim=4)


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("idx_bits", [32, 64])
def test_parmetis_two_ranks(synth, tmp_path, idx_bits):
    from gnnflow.partition.parmetis import find_library

    try:
        find_library(idx_bits)
    except GnnflowError:
        pytest.skip(f"no {idx_bits}-bit ParMETIS library")
    book = partition_graph(synth, "parmetis", 4, tmp_path / "pm", num_ranks=2, idx_bits=idx_bits)
    metis = partition_graph(synth, "metis", 4, tmp_path / "m", constraints=["vertices"])
    node_part = np.asarray(book.node_part)
    assert node_part.min() == 0 and node_part.max() == 3
    assert book.meta.extra["num_ranks"] == 2 and book.meta.extra["vtxdist"] == [0, 4000, 8000]
    assert book.quality["edge_cut"] <= 1.3 * metis.quality["edge_cut"]
    assert book.quality["balance"]["vertices"] <= 1.06
    if book.meta.extra["pt_scotch"]:
        assert "multi-constraint is ignored" in (book.meta.note or "")


def test_parmetis_missing_pieces_clear_errors(synth, tmp_path, monkeypatch):
    from gnnflow.partition.parmetis import find_library

    with pytest.raises(GnnflowError, match="no ParMETIS library found"):
        find_library(32, "/nonexistent/libparmetis.so")
    if shutil.which("mpirun") is not None:
        with pytest.raises(GnnflowError, match="no ParMETIS library found|mpi4py is not installed"):
            partition_graph(synth, "parmetis", 2, tmp_path / "x", library="/nonexistent/libparmetis.so")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GnnflowError, match="`mpirun` not found"):
        partition_graph(synth, "parmetis", 2, tmp_path / "x")
    assert not (tmp_path / "x").exists()
