"""``gnnflow bench recipes``: our standard recipes against DGL 1.1.3's own examples, same data and protocol.

For each model (GCN, GraphSAGE, GAT) and seed, on one graph store (e.g. a
Planetoid graph from ``gnnflow prepare planetoid ... --normalize-features row``):

* **ours** — ``gnnflow train`` with the recipe file ``config/recipes/<model>-planetoid.yaml``
  (the driver's records; evaluation every epoch), under each strategy of
  ``--strategies`` (``single`` as the recipe says; ``fullbatch``, ``dgcl``,
  ``data`` ... on ``--workers`` ranks, with a METIS book made here when the strategy
  needs one);
* **DGL** — DGL 1.1.3's own layers (``dgl.nn`` ``GraphConv``, ``SAGEConv``,
  ``GATConv``, assembled by :class:`gnnflow.nn.peer.DGLModel`) trained as DGL's
  examples train them (``examples/pytorch/gcn/train.py``,
  ``examples/pytorch/gat/train.py``, ``examples/pytorch/graphsage/train_full.py``):
  the examples' hyperparameters (:data:`DGL_EXAMPLES`, kept here independently of
  our recipe files), full-graph training on a ``DGLGraph`` built from the same
  store with self-loops added as the examples add them (``remove_self_loop`` then
  ``add_self_loop``), Adam, 200 epochs.

Both sides are scored the same way: every epoch the full-graph logits in eval
mode give accuracy and loss per split (:mod:`gnnflow.strategies.metrics`) and the
epoch with the best validation accuracy (ties: lower validation loss) is
selected (:mod:`gnnflow.results.selection`); the figure is the test accuracy at
that epoch, mean ± std (``ddof=1``) over ``--seeds`` seeds, with the final
epoch's beside it.  DGL's examples print the last epoch's test accuracy (GAT's
older one stops early on validation); selection by validation accuracy is the
protocol applied to both here.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.errors import ConfigError

MODELS = ("gcn", "sage", "gat")
DEFAULT_RECIPES = Path(__file__).resolve().parents[3] / "config" / "recipes"

#: The hyperparameters of DGL 1.1.3's examples (facts of their code, kept apart from our recipes).
DGL_EXAMPLES: dict[str, dict[str, Any]] = {
    # examples/pytorch/gcn/train.py: GraphConv(in, 16, relu), dropout 0.5 before layer 2, AddSelfLoop
    "gcn": {"hidden": 16, "dropout": 0.5, "lr": 1e-2, "weight_decay": 5e-4, "epochs": 200},
    # examples/pytorch/graphsage/train_full.py: SAGEConv(in, 16, "gcn"), dropout 0.5 on the input and
    # between the layers, AddSelfLoop
    "sage": {"hidden": 16, "dropout": 0.5, "input_dropout": 0.5, "aggregator": "gcn", "lr": 1e-2,
             "weight_decay": 5e-4, "epochs": 200},
    # examples/pytorch/gat/train.py: GATConv(in, 8, 8 heads, feat_drop 0.6, attn_drop 0.6, elu),
    # GATConv(64, classes, 1 head), hidden heads flattened, output heads averaged, AddSelfLoop
    "gat": {"hidden": 8, "heads": 8, "out_heads": 1, "feat_drop": 0.6, "attn_drop": 0.6, "activation": "elu",
            "lr": 5e-3, "weight_decay": 5e-4, "epochs": 200},
}
#: strategies that read a partition book (made here with METIS when they run on several ranks)
NEEDS_BOOK = ("data", "p3", "hec", "split", "dgcl", "distdgl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", required=True, help="graph store (e.g. gnnflow prepare planetoid cora ...)")
    parser.add_argument("--model", default=",".join(MODELS), help="gcn, sage, gat or a comma list (default: all)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 on both sides (default 5)")
    parser.add_argument("--strategies", default="single",
                        help="our strategies, comma list (default single; e.g. single,fullbatch,dgcl for GCN)")
    parser.add_argument("--workers", type=int, default=2, help="ranks of the distributed strategies (default 2)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="override both sides' epochs (default: the recipe's and the example's, 200)")
    parser.add_argument("--recipes", default=str(DEFAULT_RECIPES),
                        help="directory of the recipe files <model>-planetoid.yaml (default: config/recipes)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")


def recipe_config(path: Path, graph: str, strategy: str, workers: int, seed: int, epochs: int | None,
                  partition: str | None) -> Any:
    """Our TrainConfig: the recipe file as ``gnnflow train --config`` reads it, with the run's choices."""
    from gnnflow.config import TrainConfig, load_settings
    from gnnflow.strategies.base import strategy_class

    if not path.is_file():
        raise ConfigError(f"{path}: no such recipe file (--recipes names the directory of <model>-planetoid.yaml)")
    data = load_settings(path)
    cls = strategy_class(strategy)
    distributed = cls.distributed
    # the recipe's options are single's (full_batch); fullbatch and dgcl are full-batch by construction
    known = {f.name for f in dataclasses.fields(cls.Options)}
    data["options"] = {k: v for k, v in (data.get("options") or {}).items() if k in known}
    data.update(graph=graph, strategy=strategy, seed=seed, workers=workers if distributed else 1, out=None,
                partition=partition if distributed and strategy in NEEDS_BOOK else None)
    if epochs is not None:
        data["epochs"] = epochs
    return TrainConfig.from_dict(data)


def run_ours(cfg: Any) -> dict[str, float]:
    """Train ``cfg`` with the driver; the selected epoch's and the last epoch's figures."""
    from gnnflow.results.selection import best_row
    from gnnflow.strategies.driver import run_training

    t0 = time.perf_counter()
    rows = [r.flat() for r in run_training(cfg) if r.rank == 0]
    best = best_row(rows)
    assert best is not None, "the recipe evaluates every epoch"
    return {"best_test_acc": best["test_acc"], "best_epoch": best["epoch"], "final_test_acc": rows[-1]["test_acc"],
            "first_loss": rows[0]["loss"], "wall_s": time.perf_counter() - t0}


def dgl_graph(store: Any) -> Any:
    """The store's graph as a DGLGraph with self-loops added as DGL's examples add them (AddSelfLoop)."""
    import dgl

    indptr, indices = np.asarray(store.indptr), np.asarray(store.indices)
    dst = np.repeat(np.arange(store.num_nodes), np.diff(indptr))
    g = dgl.graph((torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(dst.astype(np.int64))),
                  num_nodes=store.num_nodes)
    return dgl.add_self_loop(dgl.remove_self_loop(g))


def run_dgl(model: str, store: Any, g: Any, seed: int, epochs: int | None) -> dict[str, float]:
    """DGL's layers trained as DGL's example trains ``model``, scored as ours is."""
    from gnnflow.nn.peer import DGLModel
    from gnnflow.strategies.common import seed_everything

    ex = dict(DGL_EXAMPLES[model])
    n_epochs = epochs if epochs is not None else ex.pop("epochs")
    ex.pop("epochs", None)
    lr, weight_decay = ex.pop("lr"), ex.pop("weight_decay")
    hidden, dropout, heads = ex.pop("hidden"), ex.pop("dropout", 0.0), ex.pop("heads", 1)
    x = torch.from_numpy(np.array(store.features, dtype=np.float32))
    y = torch.from_numpy(np.array(store.labels, dtype=np.int64))
    splits = {s: torch.from_numpy(np.array(getattr(store, f"{s}_idx"), dtype=np.int64))
              for s in ("train", "val", "test")}
    t0 = time.perf_counter()
    seed_everything(seed)
    net = DGLModel(model, x.shape[1], hidden, int(store.num_classes), 2, dropout, heads, **ex)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    scores = EpochScores()
    first_loss = float("nan")
    for epoch in range(n_epochs):
        net.train()
        loss = torch.nn.functional.cross_entropy(net([g, g], x)[splits["train"]], y[splits["train"]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if epoch == 0:
            first_loss = float(loss.detach())
        net.eval()
        with torch.no_grad():
            scores.add(epoch, net([g, g], x), y, splits)
    return scores.result(first_loss, time.perf_counter() - t0)


class EpochScores:
    """A DGL-side training loop scored as ours is: every epoch's logits give each split's accuracy
    and loss; the epoch with the best validation accuracy (ties: lower validation loss,
    :func:`gnnflow.results.selection.better`) is kept, and the last epoch's test accuracy."""

    def __init__(self) -> None:
        self.best: dict[str, Any] | None = None
        self.final = float("nan")

    def add(self, epoch: int, logits: torch.Tensor, y: torch.Tensor, splits: dict[str, torch.Tensor]) -> None:
        from gnnflow.results.selection import better
        from gnnflow.strategies.metrics import evaluate_logits

        m = evaluate_logits({s: (logits[ids], y[ids]) for s, ids in splits.items()})
        if better(m["val_acc"], m["val_loss"], self.best):
            self.best = {"epoch": epoch, **m}
        self.final = m["test_acc"]

    def result(self, first_loss: float, wall_s: float) -> dict[str, float]:
        assert self.best is not None, "no epoch was scored"
        return {"best_test_acc": self.best["test_acc"], "best_epoch": self.best["epoch"],
                "final_test_acc": self.final, "first_loss": first_loss, "wall_s": wall_s}


def stats(values: list[float]) -> dict[str, float]:
    """Mean and sample standard deviation (``ddof=1``; 0 for one value)."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def pm(s: dict[str, float]) -> str:
    """``mean ± std`` of accuracies :func:`stats` gives, in percent."""
    return f"{100 * s['mean']:.2f} ± {100 * s['std']:.2f}"


def accuracy_models(args: argparse.Namespace, known: tuple[str, ...]) -> list[str]:
    """The accuracy benches' common flags checked: ``--model`` (a comma list among ``known``),
    ``--seeds`` (at least 1) and ``--threads`` (torch threads, 0: the default) applied."""
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    for m in models:
        if m not in known:
            raise ConfigError(f"--model {m}: choose among {', '.join(known)}")
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    return models


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.data.store import open_store
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.preflight import check_run

    models = accuracy_models(args, MODELS)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    store = open_store(args.graph)
    g = dgl_graph(store)
    recipes = Path(args.recipes)
    results: dict[str, Any] = {}
    ratios = []
    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-recipes-") as tmp:
        book = None
        if args.workers > 1 and any(s in NEEDS_BOOK for s in strategies):
            from gnnflow.partition.api import partition_graph

            book = str(partition_graph(args.graph, "metis", args.workers, Path(tmp) / "book", seed=0).path)
        for model in models:
            per: dict[str, list[dict[str, float]]] = {"dgl": []}
            skipped = {}
            for seed in range(args.seeds):
                per["dgl"].append(run_dgl(model, store, g, seed, args.epochs))
                for strategy in strategies:
                    cfg = recipe_config(recipes / f"{model}-planetoid.yaml", args.graph, strategy, args.workers,
                                        seed, args.epochs, book)
                    try:  # e.g. fullbatch trains GCN only
                        check_run(cfg, strategy_class(strategy))
                    except ConfigError as exc:
                        skipped[strategy] = str(exc)
                        continue
                    per.setdefault(strategy, []).append(run_ours(cfg))
            ran = [s for s in strategies if s in per]
            entry: dict[str, Any] = {"skipped": skipped}
            for side, runs in per.items():
                entry[side] = {"runs": runs,
                               "best_test_acc": stats([r["best_test_acc"] for r in runs]),
                               "final_test_acc": stats([r["final_test_acc"] for r in runs]),
                               "best_epoch": stats([float(r["best_epoch"]) for r in runs])}
            dgl_mean = entry["dgl"]["best_test_acc"]["mean"]
            entry["diff_points"] = {s: 100 * (entry[s]["best_test_acc"]["mean"] - dgl_mean) for s in ran}
            if len(ran) > 1:
                means = [entry[s]["best_test_acc"]["mean"] for s in ran]
                entry["strategy_spread_points"] = 100 * (max(means) - min(means))
            results[model] = entry
            for s in ran:
                what = f"{model} on {store.name}, test accuracy at the best-validation epoch, mean of {args.seeds} seeds"
                ratios.append(ratio(f"{model} {s}: ours / DGL example test accuracy",
                                    operand(entry[s]["best_test_acc"]["mean"], "accuracy",
                                            f"gnnflow train --strategy {s}, {what}"),
                                    operand(dgl_mean, "accuracy", f"DGL 1.1.3 layers as its example trains, {what}"),
                                    goal=">= 0.99"))
    lines = [f"recipes on {store.name} ({store.num_nodes} vertices): test accuracy (%) at the best-validation "
             f"epoch, mean ± std over {args.seeds} seeds (final epoch in brackets)"]
    for model, entry in results.items():
        dgl = entry["dgl"]
        parts = [f"DGL {pm(dgl['best_test_acc'])} [{pm(dgl['final_test_acc'])}]"]
        for s in entry["diff_points"]:
            ranks = f" {args.workers} ranks" if s not in ("single",) and args.workers > 1 else ""
            parts.append(f"ours {s}{ranks} {pm(entry[s]['best_test_acc'])} [{pm(entry[s]['final_test_acc'])}] "
                         f"({entry['diff_points'][s]:+.2f})")
        spread = (f"; strategies within {entry['strategy_spread_points']:.2f} points"
                  if "strategy_spread_points" in entry else "")
        skipped = "".join(f"; {s} not run ({why})" for s, why in entry["skipped"].items())
        lines.append(f"  {model}: " + "; ".join(parts) + spread + skipped)
    result = {"summary": "\n".join(lines), "graph": args.graph, "dataset": store.name, "seeds": args.seeds,
              "strategies": strategies, "workers": args.workers, "models": results, "dgl_examples": DGL_EXAMPLES,
              "torch_threads": torch.get_num_threads()}
    worst = max(range(len(ratios)), key=lambda i: abs(1.0 - ratios[i]["value"]))
    return headline(result, ratios, worst)
