"""``synthetic-hetero``: a typed graph shaped like ogbn-mag.

Vertex types ``paper``, ``author``, ``institution``, ``field_of_study`` and
the four ogbn-mag relations::

    (author, affiliated_with, institution)   one per author (a share ``affiliation_frac`` of them)
    (author, writes, paper)                  1 .. 2 authors_per_paper - 1 authors per paper
    (paper, cites, paper)                    ~cites_per_paper per paper
    (paper, has_topic, field_of_study)       fields_per_paper fields per paper

Papers carry labels (their "venue"), like ogbn-mag.  By default (a small graph
for tests) authors and fields get features of their own, smaller dims, so
homogenization is exercised with per-type dims (DistDGLv2 §4.1.4); a dim of 0
makes a type featureless (institutions always are, unless ``institution_dim``).
Authors and fields have a home class and each relation prefers endpoints of the
same class with probability ``homophily``, with power-law popularity (the
sampler of :mod:`gnnflow.data.synthetic`); edges drawn twice are kept once.

Size presets (:data:`PRESETS`, ``gnnflow prepare synthetic-hetero --preset``):

* ``ogbn-mag``: ogbn-mag's counts (736,389 papers, 1,134,649 authors, 8,740
  institutions, 59,965 fields: 1.94M vertices; about 21.1M edges before the
  reverses), 128-d paper features, the other types featureless, 349 classes;
* ``igbh-small``: IGBH-small's counts (1M papers, 1,926,066 authors, 14,751
  institutes, 190,449 fields of study; about 26.2M edges), 1024-d features on
  every type, 19 classes (IGB's ``label_19``) — 12.8 GB of features, written
  in memory: more than a 24 GiB host holds with the homogenized copy; lower
  the dims to try it smaller.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gnnflow.data.hetero import HeteroGraph
from gnnflow.data.homogenize import write_hetero_store
from gnnflow.data.store import GraphStore
from gnnflow.data.synthetic import EndpointSampler
from gnnflow.errors import ConfigError

HETERO_DEFAULTS: dict[str, Any] = {
    "num_papers": 2000,
    "num_authors": 3000,
    "num_institutions": 100,
    "num_fields": 200,
    "num_classes": 8,
    "paper_dim": 64,
    "author_dim": 32,
    "field_dim": 16,
    "institution_dim": 0,
    "cites_per_paper": 5.0,
    "authors_per_paper": 2.5,
    "fields_per_paper": 2,
    "affiliation_frac": 1.0,
    "homophily": 0.7,
    "feature_signal": 0.5,
    "train_frac": 0.5,
    "val_frac": 0.25,
    "seed": 0,
}

#: size presets: generator parameters shaped like a public heterogeneous benchmark
PRESETS: dict[str, dict[str, Any]] = {
    # ogbn-mag (Hu et al., OGB): vertex counts, relation sizes per paper (writes 7,145,660, cites
    # 5,416,271, has_topic 7,505,078, affiliated_with 1,043,998), 128-d paper features, 349 venues;
    # OGB's split is by year (train 629,571 / val 64,879 / test 41,939), drawn at random here
    "ogbn-mag": {"num_papers": 736_389, "num_authors": 1_134_649, "num_institutions": 8_740,
                 "num_fields": 59_965, "num_classes": 349, "paper_dim": 128, "author_dim": 0, "field_dim": 0,
                 "cites_per_paper": 7.45, "authors_per_paper": 10.0, "fields_per_paper": 11,
                 "affiliation_frac": 0.92, "train_frac": 0.855, "val_frac": 0.088},
    # IGBH-small (Khatua et al., IGB): paper 1,000,000, author 1,926,066, institute 14,751, fos 190,449;
    # cites 12,070,502, written_by 4,553,516, affiliated_to 1,030,081, topic 8,523,785; 1024-d
    # features on every type (RoBERTa sentence embeddings); label_19
    "igbh-small": {"num_papers": 1_000_000, "num_authors": 1_926_066, "num_institutions": 14_751,
                   "num_fields": 190_449, "num_classes": 19, "paper_dim": 1024, "author_dim": 1024,
                   "field_dim": 1024, "institution_dim": 1024, "cites_per_paper": 12.3,
                   "authors_per_paper": 4.6, "fields_per_paper": 9, "affiliation_frac": 0.535,
                   "train_frac": 0.6, "val_frac": 0.2},
}


def preset_params(preset: str | None, **overrides: Any) -> dict[str, Any]:
    """The generator parameters of ``preset`` (None: the small defaults) with ``overrides``."""
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"--preset: unknown {preset!r}; choose one of {', '.join(PRESETS)}")
    return {**(PRESETS[preset] if preset else {}), **{k: v for k, v in overrides.items() if v is not None}}


def _features(rng: np.random.Generator, labels: np.ndarray, num_classes: int, dim: int,
              signal: float) -> np.ndarray:
    mu = rng.standard_normal((num_classes, dim)).astype(np.float32)
    mu *= np.float32(signal * np.sqrt(dim / 2.0)) / np.linalg.norm(mu, axis=1, keepdims=True)
    return rng.standard_normal((labels.shape[0], dim), dtype=np.float32) + mu[labels]


def _unique_pairs(src: np.ndarray, dst: np.ndarray, n_dst: int,
                  drop_loops: bool = False) -> tuple[np.ndarray, np.ndarray]:
    keys = np.unique(src * np.int64(n_dst) + dst)
    s, d = keys // n_dst, keys % n_dst
    if drop_loops:
        keep = s != d
        s, d = s[keep], d[keep]
    return s, d


def generate_synthetic_hetero(
    num_papers: int = HETERO_DEFAULTS["num_papers"],
    num_authors: int = HETERO_DEFAULTS["num_authors"],
    num_institutions: int = HETERO_DEFAULTS["num_institutions"],
    num_fields: int = HETERO_DEFAULTS["num_fields"],
    num_classes: int = HETERO_DEFAULTS["num_classes"],
    seed: int = HETERO_DEFAULTS["seed"],
    *,
    paper_dim: int = HETERO_DEFAULTS["paper_dim"],
    author_dim: int = HETERO_DEFAULTS["author_dim"],
    field_dim: int = HETERO_DEFAULTS["field_dim"],
    institution_dim: int = HETERO_DEFAULTS["institution_dim"],
    cites_per_paper: float = HETERO_DEFAULTS["cites_per_paper"],
    authors_per_paper: float = HETERO_DEFAULTS["authors_per_paper"],
    fields_per_paper: int = HETERO_DEFAULTS["fields_per_paper"],
    affiliation_frac: float = HETERO_DEFAULTS["affiliation_frac"],
    homophily: float = HETERO_DEFAULTS["homophily"],
    feature_signal: float = HETERO_DEFAULTS["feature_signal"],
    train_frac: float = HETERO_DEFAULTS["train_frac"],
    val_frac: float = HETERO_DEFAULTS["val_frac"],
) -> HeteroGraph:
    """Generate the ogbn-mag-shaped typed graph (per-type ids); a ``*_dim`` of 0: featureless."""
    for name, v in (("papers", num_papers), ("authors", num_authors),
                    ("institutions", num_institutions), ("fields", num_fields)):
        if v < 1:
            raise ConfigError(f"--{name} must be >= 1, got {v}")
    if not 2 <= num_classes <= min(num_papers, num_authors, num_fields):
        raise ConfigError(f"--classes must be in [2, min(papers, authors, fields)], got {num_classes}")
    if not 0 <= homophily <= 1:
        raise ConfigError(f"homophily must be in [0, 1], got {homophily}")
    if authors_per_paper < 1 or fields_per_paper < 1 or not 0 < affiliation_frac <= 1:
        raise ConfigError(f"authors_per_paper and fields_per_paper must be >= 1 and affiliation_frac in (0, 1], "
                          f"got {authors_per_paper}, {fields_per_paper}, {affiliation_frac}")
    rng = np.random.default_rng(seed)

    def pareto(n: int) -> np.ndarray:
        return np.minimum((1.0 - rng.random(n)) ** (-1.0 / 1.5), np.sqrt(n) * 4)

    y_paper = rng.integers(0, num_classes, num_papers, dtype=np.int64)
    y_author = rng.integers(0, num_classes, num_authors, dtype=np.int64)
    y_field = rng.integers(0, num_classes, num_fields, dtype=np.int64)
    papers = EndpointSampler(pareto(num_papers), y_paper, num_classes)
    authors = EndpointSampler(pareto(num_authors), y_author, num_classes)
    fields = EndpointSampler(pareto(num_fields), y_field, num_classes)

    def pick(sampler: EndpointSampler, classes: np.ndarray) -> np.ndarray:
        same = rng.random(classes.shape[0]) < homophily
        out = np.empty(classes.shape[0], dtype=np.int64)
        out[same] = sampler.within(rng, classes[same])
        out[~same] = sampler.global_(rng, int((~same).sum()))
        return out

    # writes: 1 .. 2m-1 authors per paper (mean m), preferring authors of the paper's class.
    k = rng.integers(1, int(round(2 * authors_per_paper - 1)) + 1, num_papers)
    w_paper = np.repeat(np.arange(num_papers, dtype=np.int64), k)
    w_author = pick(authors, y_paper[w_paper])
    w_author, w_paper = _unique_pairs(w_author, w_paper, num_papers)
    # cites: citing paper uniform, cited paper popular and same-class with p=homophily.
    n_cites = int(round(cites_per_paper * num_papers))
    c_src = rng.integers(0, num_papers, n_cites, dtype=np.int64)
    c_dst = pick(papers, y_paper[c_src])
    c_src, c_dst = _unique_pairs(c_src, c_dst, num_papers, drop_loops=True)
    # has_topic: fields_per_paper fields per paper.
    t_paper = np.repeat(np.arange(num_papers, dtype=np.int64), int(fields_per_paper))
    t_field = pick(fields, y_paper[t_paper])
    t_paper, t_field = _unique_pairs(t_paper, t_field, num_fields)
    # affiliated_with: one institution per author (institutions are class-free).
    a_inst = rng.integers(0, num_institutions, num_authors, dtype=np.int64)
    a_author = np.arange(num_authors, dtype=np.int64)
    if affiliation_frac < 1:  # a share of the authors have one
        keep = np.sort(rng.permutation(num_authors)[: int(round(affiliation_frac * num_authors))])
        a_author, a_inst = keep, a_inst[keep]

    perm = rng.permutation(num_papers)
    n_tr, n_va = int(round(train_frac * num_papers)), int(round(val_frac * num_papers))
    return HeteroGraph(
        name="synthetic-hetero",
        num_nodes={"paper": num_papers, "author": num_authors,
                   "institution": num_institutions, "field_of_study": num_fields},
        edges={
            ("author", "affiliated_with", "institution"): (a_author, a_inst),
            ("author", "writes", "paper"): (w_author, w_paper),
            ("paper", "cites", "paper"): (c_src, c_dst),
            ("paper", "has_topic", "field_of_study"): (t_paper, t_field),
        },
        features={t: _features(rng, y, num_classes, d, feature_signal) for t, y, d in (
            ("paper", y_paper, paper_dim), ("author", y_author, author_dim), ("field_of_study", y_field, field_dim),
            ("institution", np.zeros(num_institutions, dtype=np.int64), institution_dim)) if d},
        labels={"paper": y_paper},
        splits={"train": {"paper": np.sort(perm[:n_tr])},
                "val": {"paper": np.sort(perm[n_tr : n_tr + n_va])},
                "test": {"paper": np.sort(perm[n_tr + n_va :])}},
        num_classes=num_classes,
        target_node_type="paper",
    )


def prepare_synthetic_hetero(out: str | os.PathLike[str], *, overwrite: bool = False,
                             name: str | None = None, reverse_edges: bool = True,
                             feature_fill: str = "neighbor-mean", normalize_features: str = "none",
                             preset: str | None = None, **kwargs: Any) -> GraphStore:
    """Generate, homogenize (DistDGLv2 §4.1.1) and write ``synthetic-hetero`` (``preset``: a size
    preset of :data:`PRESETS`, ``kwargs`` override it)."""
    kwargs = preset_params(preset, **kwargs)
    hg = generate_synthetic_hetero(**kwargs)
    if name:
        hg.name = name
    params = {**HETERO_DEFAULTS, **kwargs, **({"preset": preset} if preset else {})}
    return write_hetero_store(hg, out, overwrite=overwrite, reverse_edges=reverse_edges,
                              feature_fill=feature_fill, seed=int(params["seed"]),
                              source="synthetic-hetero", normalize_features=normalize_features,
                              meta={"generator": params, "random_features": False})
