"""``gnnflow bench hetero-accuracy``: our RGCN and R-GAT against DGL 1.1.3's relational layers, same data and protocol.

For each model (``rgcn``, ``rgat``) and seed, on one homogenized heterogeneous store
(e.g. ``gnnflow prepare magnn dblp``; docs/hetero.md):

* **ours** — ``gnnflow train --strategy single`` with the recipe file
  ``config/recipes/<model>-hetero.yaml`` (:class:`~gnnflow.nn.typed_input.TypedInput`, then
  :class:`~gnnflow.nn.RGCNConv` or :class:`~gnnflow.nn.RGATConv`; mini-batches of the
  training targets over sampled blocks; evaluation every epoch);
* **DGL** — :class:`gnnflow.nn.peer.DGLRelationalModel` built from the same
  :class:`~gnnflow.config.TrainConfig` (``HeteroLinear`` / ``HeteroEmbedding`` inputs,
  ``RelGraphConv`` with the same bases, self-loop and per-relation mean, or
  ``HeteroGraphConv`` of a ``GATConv`` per relation, summed), on DGL graphs built from the
  same store (:class:`DGLSide`: the homogeneous graph with edge types for RGCN, the
  heterograph for R-GAT), trained as DGL's mini-batch examples train: batches of the same
  size drawn from the same training targets in the same order, each through the blocks of
  ``dgl.dataloading.MultiLayerFullNeighborSampler``, Adam with the same learning rate and
  weight decay.

Before any seed, both models are checked to compute the same function: DGL's holding our
weights gives our eval-mode logits (on the whole graph and on its blocks of the training
targets) within :data:`TOLERANCE`; what the accuracies then compare is training (the
initialisers, dropout, the optimiser).  Fanouts: the recipes' are full neighbourhoods (-1
per layer) on both sides; other fanouts are refused (what is compared is the layers and
their training, not two samplers' draws).  Both sides are scored the same way: every epoch the whole graph's logits in
eval mode give accuracy and loss per split (:mod:`gnnflow.strategies.metrics`), the epoch
with the best validation accuracy (ties: lower validation loss;
:mod:`gnnflow.results.selection`) is selected, and the figure is the test accuracy at that
epoch, mean ± std (``ddof=1``) over ``--seeds`` seeds, with the difference in points.  The
goal: within 1 point.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.bench.recipes import (
    DEFAULT_RECIPES,
    EpochScores,
    accuracy_models,
    pm,
    recipe_config,
    run_ours,
    stats,
)
from gnnflow.errors import ConfigError, GnnflowError

MODELS = ("rgcn", "rgat")
#: the DGL layers each model is compared with
PEERS = {"rgcn": "RelGraphConv", "rgat": "HeteroGraphConv of GATConv"}
#: the goal: |ours - DGL| in test accuracy points
GOAL_POINTS = 1.0
#: the same function: eval-mode logits of both models holding the same weights differ by at most this
#: much, relative to max(1, largest |logit|)
TOLERANCE = 1e-4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", required=True, help="homogenized store (e.g. gnnflow prepare magnn dblp ...)")
    parser.add_argument("--model", default=",".join(MODELS), help="rgcn, rgat or a comma list (default: both)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 on both sides (default 5)")
    parser.add_argument("--epochs", type=int, default=None, help="override both sides' epochs (default: the recipe's)")
    parser.add_argument("--recipes", default=str(DEFAULT_RECIPES),
                        help="directory of the recipe files <model>-hetero.yaml (default: config/recipes)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")


def dgl_graphs(store: Any, typed: Any) -> tuple[Any, Any]:
    """``(homogeneous graph, heterograph)`` of the store in DGL: the first with ``etype`` and the
    per-relation mean ``norm`` ``1 / |N_r(i)|`` as edge data, its edges sorted by relation
    (``RelGraphConv``'s presorted path); the second with one edge type per relation."""
    import dgl

    tm = typed.typemap
    n, num_rels = store.num_nodes, len(tm.edge_types)
    indptr = np.asarray(store.indptr)
    src = np.asarray(store.indices, dtype=np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    etype = np.asarray(typed.etypes, dtype=np.int64)
    order = np.argsort(etype, kind="stable")
    src, dst, etype = src[order], dst[order], etype[order]
    per_row = np.bincount(dst * num_rels + etype, minlength=n * num_rels)
    norm = 1.0 / per_row[dst * num_rels + etype]
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
    g.edata["etype"] = torch.from_numpy(etype)
    g.edata["norm"] = torch.from_numpy(norm.astype(np.float32)).unsqueeze(1)
    data = {}
    for r, (s, rel, d) in enumerate(tm.edge_types):
        sel = etype == r
        data[(s, rel, d)] = (torch.from_numpy(tm.to_type_id(src[sel])[1]), torch.from_numpy(tm.to_type_id(dst[sel])[1]))
    hg = dgl.heterograph(data, num_nodes_dict={t: tm.num_nodes_of(t) for t in tm.node_types})
    return g, hg


class DGLSide:
    """The DGL reference's view of the store: its graphs (:func:`dgl_graphs`), the featured types'
    features by name, labels and splits, and the two ways its model runs (module docstring)."""

    def __init__(self, store: Any, typed: Any) -> None:
        import dgl

        self.typed, self.tm = typed, typed.typemap
        self.homogeneous, self.hetero = dgl_graphs(store, typed)
        names = self.tm.node_types
        self.features = {names[t]: torch.from_numpy(np.array(x, dtype=np.float32)) for t, x in typed.features.items()}
        self.labels = torch.from_numpy(np.array(store.labels, dtype=np.int64))
        self.num_classes = int(store.num_classes)
        self.splits = {s: torch.from_numpy(np.array(getattr(store, f"{s}_idx"), dtype=np.int64))
                       for s in ("train", "val", "test")}
        self.offsets = torch.from_numpy(np.asarray(self.tm.node_type_offsets, dtype=np.int64))
        self.counts = [self.tm.num_nodes_of(t) for t in names]
        self.full_sampler = dgl.dataloading.MultiLayerFullNeighborSampler

    def _rows(self, net: Any, ids: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """``net``'s input rows of per-type ids ``ids`` (None: of every vertex)."""
        if ids is None:
            return net.inputs(self.features, {t: torch.arange(c) for t, c in zip(self.tm.node_types, self.counts,
                                                                                 strict=True)})
        return net.inputs({t: self.features[t][i] for t, i in ids.items() if t in self.features}, ids)

    def logits(self, net: Any) -> torch.Tensor:
        """Every vertex's logits, homogeneous order, on the whole graph (layer after layer)."""
        names = self.tm.node_types
        h = self._rows(net)
        layers = len(net.layers)
        if net.model == "rgcn":
            return net([self.homogeneous] * layers, torch.cat([h[t] for t in names]), presorted=True)
        out = net([self.hetero] * layers, h)
        some = next(iter(out.values()))  # a type that no relation reaches has no output: zero logits
        return torch.cat([out[t] if t in out else some.new_zeros(c, some.shape[1])
                          for t, c in zip(names, self.counts, strict=True)])

    def batch_logits(self, net: Any, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, labels)`` of the targets (homogeneous ids) through DGL blocks with full
        neighbourhoods (``MultiLayerFullNeighborSampler``), as DGL's mini-batch examples train."""
        import dgl

        sampler = self.full_sampler(len(net.layers))
        names = self.tm.node_types
        if net.model == "rgcn":
            input_nodes, _, blocks = sampler.sample_blocks(self.homogeneous, targets)
            types = torch.searchsorted(self.offsets, input_nodes, right=True) - 1
            local = input_nodes - self.offsets[types]
            pos = {names[t]: torch.nonzero(types == t).squeeze(1) for t in range(len(names))}
            h = self._rows(net, {t: local[p] for t, p in pos.items() if p.numel()})
            some = next(iter(h.values()))
            x = some.new_empty(input_nodes.shape[0], some.shape[1])
            for t, rows in h.items():
                x[pos[t]] = rows
            return net(blocks, x), self.labels[blocks[-1].dstdata[dgl.NID]]
        types = torch.searchsorted(self.offsets, targets, right=True) - 1
        seeds = {names[t]: targets[types == t] - self.offsets[t] for t in torch.unique(types).tolist()}
        input_nodes, _, blocks = sampler.sample_blocks(self.hetero, seeds)
        out = net(blocks, self._rows(net, input_nodes))
        dst = blocks[-1].dstdata[dgl.NID]
        return (torch.cat([out[t] for t in seeds]),
                torch.cat([self.labels[self.offsets[names.index(t)] + dst[t]] for t in seeds]))


def same_function(cfg: Any, store: Any, typed: Any, side: DGLSide) -> float:
    """Largest difference between our model's and DGL's eval-mode logits, both holding our
    freshly initialised weights, relative to ``max(1, largest |logit|)``: of every vertex on
    the whole graph and of the training targets through DGL's blocks.  The two compute the
    same function, so what the accuracies compare is training."""
    from gnnflow.nn import build_model_from_config
    from gnnflow.nn.peer import dgl_relational_from_config
    from gnnflow.strategies.common import full_inference
    from gnnflow.strategies.relational import make_embeddings

    tm = typed.typemap
    ours = build_model_from_config(cfg, store.feature_dim, int(store.num_classes), schema=typed.schema)
    theirs = dgl_relational_from_config(cfg, typed.schema, tm.node_types, tm.edge_types, side.num_classes)
    typed.embeddings = make_embeddings(typed.schema, typed.offsets, np.arange(store.num_nodes), cfg)
    theirs.copy_from(ours, typed.embeddings)
    a = full_inference(ours, store.indptr, store.indices, None, typed=typed)
    theirs.eval()
    with torch.no_grad():
        b = side.logits(theirs)
        train = side.splits["train"]
        c, _ = side.batch_logits(theirs, train)
    scale = max(1.0, float(a.abs().max()))
    return max(float((a - b).abs().max()), float((a[train] - c).abs().max())) / scale


def run_dgl(cfg: Any, side: DGLSide) -> dict[str, float]:
    """DGL's relational model of ``cfg.model`` trained and scored as ours is (module docstring)."""
    import torch.nn.functional as F

    from gnnflow.nn.peer import dgl_relational_from_config
    from gnnflow.strategies.common import batch_generator, batches, seed_everything

    tm, y, splits = side.tm, side.labels, side.splits
    t0 = time.perf_counter()
    seed_everything(cfg.seed)
    net = dgl_relational_from_config(cfg, side.typed.schema, tm.node_types, tm.edge_types, side.num_classes)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = batch_generator(cfg.seed)
    scores = EpochScores()
    first_loss = float("nan")
    for epoch in range(cfg.epochs):
        net.train()
        total = 0.0
        for targets in batches(splits["train"], cfg.batch_size, gen):
            logits, labels = side.batch_logits(net, targets)
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * targets.shape[0]
        if epoch == 0:
            first_loss = total / splits["train"].shape[0]
        net.eval()
        with torch.no_grad():
            scores.add(epoch, side.logits(net), y, splits)
    return scores.result(first_loss, time.perf_counter() - t0)


def check_fanouts(cfg: Any, path: Path) -> None:
    """Full neighbourhoods only (module docstring), refused otherwise in one line."""
    if any(f != -1 for f in cfg.fanouts):
        raise ConfigError(f"{path}: fanouts {cfg.fanouts}; bench hetero-accuracy compares with full neighbourhoods "
                          "(-1 per layer), the same on both sides")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.data.store import open_store
    from gnnflow.strategies.relational import TypedGraph

    models = accuracy_models(args, MODELS)
    store = open_store(args.graph)
    typed = TypedGraph(store)
    side = DGLSide(store, typed)
    recipes = Path(args.recipes)
    results: dict[str, Any] = {}
    ratios = []
    for model in models:
        path = recipes / f"{model}-hetero.yaml"
        per: dict[str, list[dict[str, float]]] = {"dgl": [], "ours": []}
        cfg = recipe_config(path, args.graph, "single", 1, 0, args.epochs, None)
        check_fanouts(cfg, path)
        difference = same_function(cfg, store, typed, side)
        if difference > TOLERANCE:
            raise GnnflowError(f"{model}: our model and DGL's {PEERS[model]} holding the same weights differ by "
                               f"{difference:.2e} (relative) on {store.name}; the accuracies would not compare "
                               "the same model")
        for seed in range(args.seeds):
            cfg = cfg.replace(seed=seed)
            per["dgl"].append(run_dgl(cfg, side))
            per["ours"].append(run_ours(cfg))
        entry: dict[str, Any] = {"peer": PEERS[model], "settings": cfg.to_dict(), "same_function": difference}
        for who, runs in per.items():
            entry[who] = {"runs": runs, "best_test_acc": stats([r["best_test_acc"] for r in runs]),
                           "final_test_acc": stats([r["final_test_acc"] for r in runs]),
                           "best_epoch": stats([float(r["best_epoch"]) for r in runs]),
                           "wall_s": stats([r["wall_s"] for r in runs])}
        ours_mean, dgl_mean = entry["ours"]["best_test_acc"]["mean"], entry["dgl"]["best_test_acc"]["mean"]
        entry["diff_points"] = 100 * (ours_mean - dgl_mean)
        entry["within_goal"] = abs(entry["diff_points"]) <= GOAL_POINTS
        results[model] = entry
        what = f"{model} on {store.name}, test accuracy at the best-validation epoch, mean of {args.seeds} seeds"
        ratios.append(ratio(f"{model}: ours / DGL {PEERS[model]} test accuracy",
                            operand(ours_mean, "accuracy", f"gnnflow train --strategy single, {what}"),
                            operand(dgl_mean, "accuracy", f"DGL 1.1.3 {PEERS[model]}, same settings, {what}"),
                            goal=f"|difference| <= {GOAL_POINTS:g} point"))
    lines = [f"hetero-accuracy on {store.name} ({store.num_nodes} vertices, {len(typed.typemap.node_types)} vertex "
             f"types, {typed.schema.num_rels} relations): test accuracy (%) at the best-validation epoch, "
             f"mean ± std over {args.seeds} seeds (final epoch in brackets)"]
    for model, entry in results.items():
        lines.append(f"  {model}: DGL {entry['peer']} {pm(entry['dgl']['best_test_acc'])} "
                     f"[{pm(entry['dgl']['final_test_acc'])}]; ours {pm(entry['ours']['best_test_acc'])} "
                     f"[{pm(entry['ours']['final_test_acc'])}] ({entry['diff_points']:+.2f} points, goal "
                     f"within {GOAL_POINTS:g}: {'met' if entry['within_goal'] else 'NOT met'})")
    result = {"summary": "\n".join(lines), "graph": args.graph, "dataset": store.name, "seeds": args.seeds,
              "models": results, "torch_threads": torch.get_num_threads()}
    worst = max(range(len(ratios)), key=lambda i: abs(1.0 - ratios[i]["value"]))
    return headline(result, ratios, worst)
