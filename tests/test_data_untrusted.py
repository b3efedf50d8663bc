"""Dataset files are untrusted: a crafted Planetoid pickle or OGB split_dict.pt never runs
code (issue 17); genuine files in the formats numpy 1.x / old scipy / Python 2 wrote still load."""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from gnnflow.data.planetoid import read_planetoid
from gnnflow.data.store import open_store
from tests.test_data_ogb import write_arxiv_like
from tests.test_data_planetoid import write_planetoid


class RunsShell:
    """Unpickling calls os.system (pickled as posix.system)."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class TouchesFile:
    """Unpickling calls pathlib.Path.touch (at protocol 2 reached through builtins.getattr)."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def _prepare(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnflow.cli", "prepare", *argv],
                          capture_output=True, text=True, timeout=120)


def _payload_is_real(marker: pathlib.Path, plain_load) -> None:
    """An unrestricted load runs the payload (so the test below can fail)."""
    plain_load()
    assert marker.exists()
    marker.unlink()


def _refused(proc, out, marker, file_name, global_name):
    assert proc.returncode == 1, proc.stderr
    # stderr also holds log lines; the error is one line
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0].startswith("gnnflow prepare: error: "), proc.stderr
    err = errors[0]
    assert file_name in err and global_name in err and "refused" in err, err
    assert not marker.exists()  # the payload never ran
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(".out")]


@pytest.mark.parametrize(("part", "payload", "proto", "global_name"), [
    ("x", RunsShell, 2, "posix.system"),
    ("graph", TouchesFile, 2, "getattr"),
    ("graph", TouchesFile, 4, "pathlib.Path.touch"),
])
def test_crafted_planetoid_file_does_not_run(tmp_path, part, payload, proto, global_name):
    raw = tmp_path / "raw"
    objs = write_planetoid(raw, "cora", [12, 10, 14, 11, 13])
    marker = tmp_path / "marker"
    # Hide the payload inside a genuine-looking object (the adjacency dict or a tuple).
    obj = objs["graph"] if part == "graph" else (objs["x"],)
    if part == "graph":
        obj[3] = [payload(marker)]
    else:
        obj = (obj[0], payload(marker))
    with open(raw / f"ind.cora.{part}", "wb") as fh:
        pickle.dump(obj, fh, protocol=proto)
    _payload_is_real(marker, lambda: pickle.loads((raw / f"ind.cora.{part}").read_bytes()))
    out = tmp_path / "out"
    _refused(_prepare("cora", "--raw-dir", str(raw), "--out", str(out)), out, marker,
             f"ind.cora.{part}", global_name)


def _old_format(data: bytes) -> bytes:
    """A protocol-2 pickle as numpy 1.x and scipy < 1.8 wrote it (module paths only differ)."""
    return (data.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
            .replace(b"scipy.sparse._csr\n", b"scipy.sparse.csr\n"))


def test_planetoid_old_module_paths_and_protocols_load(tmp_path):
    """Files naming numpy.core.multiarray, scipy.sparse.csr, copy_reg._reconstructor and
    __builtin__.object (protocol 0, as Python 2 wrote new-style objects) still load."""
    raw = tmp_path / "raw"
    objs = write_planetoid(raw, "citeseer", [13, 10, 14, 11])
    for part in ("x", "tx", "ally"):
        f = raw / f"ind.citeseer.{part}"
        data = _old_format(f.read_bytes())
        assert b"numpy.core.multiarray" in data
        f.write_bytes(data)
    (raw / "ind.citeseer.allx").write_bytes(pickle.dumps(objs["allx"], protocol=0))
    assert b"copy_reg\n_reconstructor" in (raw / "ind.citeseer.allx").read_bytes()
    d = read_planetoid(raw, "citeseer")
    assert np.array_equal(d["features"][:10], objs["allx"].toarray())
    for j, t in enumerate([13, 10, 14, 11]):
        assert np.array_equal(d["features"][t], objs["tx"].toarray()[j])


def _rewrite_torch_pickle(path: pathlib.Path, edit) -> None:
    """Apply ``edit`` to the data.pkl inside a torch.save zip archive."""
    with zipfile.ZipFile(path) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for info, data in entries:
            z.writestr(info, edit(data) if info.filename.endswith("data.pkl") else data)
    path.write_bytes(buf.getvalue())


def test_ogb_split_dict_loads_numpy_arrays(tmp_path):
    root = tmp_path / "ogbn_arxiv"
    *_, perm = write_arxiv_like(root)
    f = root / "split" / "time" / "split_dict.pt"
    rev = perm[::-1].copy()  # differs from the csv files, so the .pt is what was read
    torch.save({"train": rev[:20], "valid": rev[20:30], "test": rev[30:]}, f)
    _rewrite_torch_pickle(f, _old_format)  # numpy 1.x names, as OGB's files were written
    out = tmp_path / "g"
    proc = _prepare("ogbn-arxiv", "--raw-dir", str(tmp_path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    s = open_store(out)
    assert np.array_equal(s.train_idx, rev[:20]) and np.array_equal(s.test_idx, rev[30:])


@pytest.mark.parametrize(("payload", "global_name"), [(RunsShell, "posix.system"),
                                                       (TouchesFile, "getattr")])
def test_crafted_ogb_split_dict_does_not_run(tmp_path, payload, global_name):
    root = tmp_path / "ogbn_arxiv"
    *_, perm = write_arxiv_like(root)
    marker = tmp_path / "marker"
    f = root / "split" / "time" / "split_dict.pt"
    torch.save({"train": perm[:20], "valid": payload(marker), "test": perm[30:]}, f)
    _payload_is_real(marker, lambda: torch.load(f, weights_only=False))
    out = tmp_path / "out"
    _refused(_prepare("ogbn-arxiv", "--raw-dir", str(tmp_path), "--out", str(out)), out, marker,
             "split_dict.pt", global_name)
