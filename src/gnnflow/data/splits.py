"""Drawing a train/val/test split for a source that has none (``gnnflow prepare --split``).

Two methods, both drawn from the labelled vertices only (label -1 goes to no split) with
``numpy.random.default_rng(seed)``, so a seed gives the same split on every machine:

* ``random``: the labelled vertices shuffled, the first ``train_frac`` of them for training, the
  next ``val_frac`` for validation, the rest for testing;
* ``per-class`` (Shchur et al., "Pitfalls of Graph Neural Network Evaluation", 2018: 20
  training and 30 validation vertices per class, the rest test): per class, in class order,
  the class's vertices shuffled, ``train_per_class`` for training, the next ``val_per_class``
  for validation, the rest for testing.  A class with fewer than ``train_per_class +
  val_per_class`` vertices gives what it has, training first (``min(K, n_c)`` training, then up
  to ``M`` validation, no test vertex); such classes are logged and named in the split's
  description, which ``meta.json`` records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from gnnflow.errors import ConfigError

log = logging.getLogger("gnnflow.data")

SPLIT_METHODS = ("random", "per-class")


@dataclass(frozen=True)
class SplitSpec:
    """How to draw a split (see the module docstring)."""

    method: str = "random"
    train_frac: float = 0.6
    val_frac: float = 0.2
    train_per_class: int = 20
    val_per_class: int = 30
    seed: int = 0

    def check(self) -> None:
        """One line for a setting that cannot give a split."""
        if self.method not in SPLIT_METHODS:
            raise ConfigError(f"--split: {self.method!r}; choose one of {', '.join(SPLIT_METHODS)}")
        if self.method == "random" and not (0 < self.train_frac < 1 and 0 <= self.val_frac
                                            and self.train_frac + self.val_frac < 1):
            raise ConfigError(f"--train-frac {self.train_frac} / --val-frac {self.val_frac} must leave a test split")
        if self.method == "per-class" and (self.train_per_class < 1 or self.val_per_class < 0):
            raise ConfigError(f"--train-per-class {self.train_per_class} / --val-per-class {self.val_per_class}: "
                              "give at least 1 training vertex per class and no negative count")

    def draw(self, labels: np.ndarray, num_classes: int) -> tuple[dict[str, np.ndarray], str]:
        """``({"train", "val", "test"}: sorted int64 ids, description)`` for ``labels`` (-1:
        unlabelled) of ``num_classes`` classes."""
        self.check()
        labels = np.asarray(labels)
        rng = np.random.default_rng(self.seed)
        if self.method == "random":
            pool = rng.permutation(np.flatnonzero(labels >= 0))
            k_tr, k_va = int(round(self.train_frac * pool.size)), int(round(self.val_frac * pool.size))
            parts = [pool[:k_tr], pool[k_tr:k_tr + k_va], pool[k_tr + k_va:]]
            how = f"random (seed {self.seed})"
        else:
            parts, how = self._per_class(labels, num_classes, rng)
        return {s: np.sort(p).astype(np.int64) for s, p in zip(("train", "val", "test"), parts, strict=True)}, how

    def _per_class(self, labels: np.ndarray, num_classes: int,
                   rng: np.random.Generator) -> tuple[list[np.ndarray], str]:
        k, m = self.train_per_class, self.val_per_class
        train, val, test, short = [], [], [], []
        for c in range(num_classes):
            ids = rng.permutation(np.flatnonzero(labels == c))
            if ids.size < k + m:
                short.append(f"{c} ({ids.size})")
            train.append(ids[:k])
            val.append(ids[k:k + m])
            test.append(ids[k + m:])
        how = f"per-class ({k} train, {m} val per class, the rest test; seed {self.seed})"
        if short:
            log.warning("split per-class: %d class(es) have fewer than %d vertices and give what they have, "
                        "training first, no test vertex: class (vertices) %s", len(short), k + m, ", ".join(short))
            how += f"; classes with fewer than {k + m} vertices, training first, no test vertex: {', '.join(short)}"
        return [np.concatenate(p) if p else np.zeros(0, np.int64) for p in (train, val, test)], how
