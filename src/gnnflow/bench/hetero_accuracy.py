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
  ``HeteroGraphConv`` of a ``GATConv`` per relation, summed), on a DGL graph built from
  the same store, trained with Adam (same learning rate and weight decay) on batches of
  the same size drawn from the same training targets in the same order.

Fanouts: the recipe's are full neighbourhoods (-1 per layer), which both sides use: DGL
computes every batch on the whole graph, which gives a target the output our blocks of its
whole 2-hop neighbourhood give it; other fanouts are refused (the two samplers' draws
could not be the same).  Both sides are scored the same way: every epoch the full-graph
logits in eval mode give accuracy and loss per split (:mod:`gnnflow.strategies.metrics`),
the epoch with the best validation accuracy (ties: lower validation loss;
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
from gnnflow.bench.recipes import DEFAULT_RECIPES, pm, recipe_config, run_ours, stats
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


def type_features(typed: Any) -> dict[str, torch.Tensor]:
    """The featured vertex types' feature rows, by type name (what DGL's model reads)."""
    names = typed.typemap.node_types
    return {names[t]: torch.from_numpy(np.array(x, dtype=np.float32)) for t, x in typed.features.items()}


def same_function(cfg: Any, store: Any, typed: Any, graphs: tuple[Any, Any]) -> float:
    """Largest difference between our model's and DGL's eval-mode logits of every vertex, both
    holding our freshly initialised weights, relative to ``max(1, largest |logit|)``: the two
    models compute the same function (so that what the accuracies compare is training)."""
    from gnnflow.nn import build_model_from_config
    from gnnflow.nn.peer import dgl_relational_from_config
    from gnnflow.strategies.common import full_inference

    tm = typed.typemap
    ours = build_model_from_config(cfg, store.feature_dim, int(store.num_classes), schema=typed.schema)
    theirs = dgl_relational_from_config(cfg, typed.schema, tm.node_types, tm.edge_types, int(store.num_classes))
    theirs.copy_from(ours)
    a = full_inference(ours, store.indptr, store.indices, None, typed=typed)
    theirs.eval()
    with torch.no_grad():
        b = theirs(graphs[0] if cfg.model == "rgcn" else graphs[1], type_features(typed))
    return float((a - b).abs().max()) / max(1.0, float(a.abs().max()))


def run_dgl(cfg: Any, store: Any, typed: Any, graphs: tuple[Any, Any]) -> dict[str, float]:
    """DGL's relational model of ``cfg.model`` trained and scored as ours is (module docstring)."""
    import torch.nn.functional as F

    from gnnflow.nn.peer import dgl_relational_from_config
    from gnnflow.results.selection import better
    from gnnflow.strategies.common import batch_generator, batches, seed_everything
    from gnnflow.strategies.metrics import evaluate_logits

    tm = typed.typemap
    graph = graphs[0] if cfg.model == "rgcn" else graphs[1]
    features = type_features(typed)
    y = torch.from_numpy(np.array(store.labels, dtype=np.int64))
    splits = {s: torch.from_numpy(np.array(getattr(store, f"{s}_idx"), dtype=np.int64))
              for s in ("train", "val", "test")}
    t0 = time.perf_counter()
    seed_everything(cfg.seed)
    net = dgl_relational_from_config(cfg, typed.schema, tm.node_types, tm.edge_types, int(store.num_classes))
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = batch_generator(cfg.seed)
    best: dict[str, Any] | None = None
    first_loss = final = float("nan")
    for epoch in range(cfg.epochs):
        net.train()
        total = 0.0
        for targets in batches(splits["train"], cfg.batch_size, gen):
            loss = F.cross_entropy(net(graph, features)[targets], y[targets])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * targets.shape[0]
        if epoch == 0:
            first_loss = total / splits["train"].shape[0]
        net.eval()
        with torch.no_grad():
            logits = net(graph, features)
        m = evaluate_logits({s: (logits[ids], y[ids]) for s, ids in splits.items()})
        if better(m["val_acc"], m["val_loss"], best):
            best = {"epoch": epoch, **m}
        final = m["test_acc"]
    assert best is not None
    return {"best_test_acc": best["test_acc"], "best_epoch": best["epoch"], "final_test_acc": final,
            "first_loss": first_loss, "wall_s": time.perf_counter() - t0}


def check_fanouts(cfg: Any, path: Path) -> None:
    """Full neighbourhoods only (module docstring), refused otherwise in one line."""
    if any(f != -1 for f in cfg.fanouts):
        raise ConfigError(f"{path}: fanouts {cfg.fanouts}; bench hetero-accuracy compares with full neighbourhoods "
                          "(-1 per layer), the same on both sides")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.data.store import open_store
    from gnnflow.strategies.relational import TypedGraph

    models = [m.strip() for m in args.model.split(",") if m.strip()]
    for m in models:
        if m not in MODELS:
            raise ConfigError(f"--model {m}: choose among {', '.join(MODELS)}")
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    store = open_store(args.graph)
    typed = TypedGraph(store)
    graphs = dgl_graphs(store, typed)
    recipes = Path(args.recipes)
    results: dict[str, Any] = {}
    ratios = []
    for model in models:
        path = recipes / f"{model}-hetero.yaml"
        per: dict[str, list[dict[str, float]]] = {"dgl": [], "ours": []}
        cfg = recipe_config(path, args.graph, "single", 1, 0, args.epochs, None)
        check_fanouts(cfg, path)
        difference = same_function(cfg, store, typed, graphs)
        if difference > TOLERANCE:
            raise GnnflowError(f"{model}: our model and DGL's {PEERS[model]} holding the same weights differ by "
                               f"{difference:.2e} (relative) on {store.name}; the accuracies would not compare "
                               "the same model")
        for seed in range(args.seeds):
            cfg = cfg.replace(seed=seed)
            per["dgl"].append(run_dgl(cfg, store, typed, graphs))
            per["ours"].append(run_ours(cfg))
        entry: dict[str, Any] = {"peer": PEERS[model], "settings": cfg.to_dict(), "same_function": difference}
        for side, runs in per.items():
            entry[side] = {"runs": runs, "best_test_acc": stats([r["best_test_acc"] for r in runs]),
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
