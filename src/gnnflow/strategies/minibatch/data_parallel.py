"""Data-parallel mini-batch training over a partitioned graph (DistDGLv2 §3.3, §4).

Every rank trains on mini-batches drawn from its own part's training vertices
(level-2 part, §4.1.2), samples with non-local vertices through their owners
(§4.2.2), loads remote features with one all-to-all per batch, and keeps the
model replicated with synchronous SGD (gradient all-reduce), with the
asynchronous mini-batch pipeline of §4.2.1 running ahead of training.  All of
that is :class:`~gnnflow.strategies.minibatch.base.MiniBatchStrategy`, with RGCN and
R-GAT on a typed book (per-relation sampling, per-type feature rows, the featureless
types' embedding rows read synchronously and updated on their owners) from
:class:`~gnnflow.strategies.minibatch.relational.RelationalMiniBatch`; this module adds
the strategy name and options (its check is :mod:`gnnflow.strategies.verify.data_parallel`).

Because synchronous SGD sums the ranks' gradients of ``CE_sum(local) / N_global``,
one step with P ranks equals one single-process step on the union of the P
micro-batches ("the estimation of the model gradients is unbiased ... does not
affect the convergence rate or the model accuracy", §4.1.2);
:mod:`gnnflow.strategies.verify.data_parallel` checks exactly that, with the same keyed
draws on both sides (finite fanouts too).
"""

from __future__ import annotations

from dataclasses import dataclass

from gnnflow.options import option
from gnnflow.strategies.device_path import DevicePathOptions
from gnnflow.strategies.minibatch.options import MiniBatchOptions
from gnnflow.strategies.minibatch.relational import RelationalMiniBatch


@dataclass(frozen=True)
class DataParallelOptions(MiniBatchOptions, DevicePathOptions):
    """Data-parallel's options: those of every mini-batch strategy, with a hot-row cache, and the
    GPU path's (sampling on the rank's device, hot rows there)."""

    #: products-shaped graph, 4 parts, fanouts 15,10,5: 256 MiB serves about half the remote rows
    feature_cache_mib: float = option(256.0, "MiB of hot remote feature rows a rank caches, chosen from "
                                      "presampled batches (DistDGLv2 §4.2.1's local cache)", minimum=0)


class DataParallel(RelationalMiniBatch):
    """DistDGLv2-style data-parallel training (``--strategy data``)."""

    name = "data"
    Options = DataParallelOptions
    exact = True
