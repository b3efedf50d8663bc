"""Equivalence checks of the strategies that claim single-process mathematics (``Strategy.exact``).

Each check runs the strategy on several ranks and the single-process computation on the same
input, and compares loss, outputs and gradients with one helper
(:func:`~gnnflow.strategies.verify.compare.compare`), to a tolerance near float32 rounding.
``gnnflow verify`` and the tests call the same functions; each can be made to fail (a dropped
gradient, backward shuffle or SpMM round, a perturbed sampler), which its tests show.

:data:`CHECKS` maps a strategy name to its check; the approximate strategies (``hec``) and the
peer (``distdgl``) have none: they are compared by accuracy at equal epochs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gnnflow.errors import ConfigError
from gnnflow.strategies.verify.data_parallel import verify as verify_data_parallel
from gnnflow.strategies.verify.fullbatch import verify_dgcl, verify_row1d
from gnnflow.strategies.verify.split import verify as verify_split

#: strategy -> ``check(workers, model, seed, **kw) -> {"passed", "max_abs_diff", "max_rel_diff", ...}``
CHECKS: dict[str, Callable[..., dict[str, Any]]] = {
    "data": verify_data_parallel,
    "split": verify_split,
    "fullbatch": verify_row1d,
    "dgcl": verify_dgcl,
}


def check_of(strategy: str) -> Callable[..., dict[str, Any]]:
    """The equivalence check of ``strategy``, or a ConfigError naming the strategies that have one."""
    from gnnflow.strategies.base import strategy_class

    cls = strategy_class(strategy)
    if not cls.exact:
        raise ConfigError(f"--strategy {strategy}: the strategy does not claim single-process mathematics; "
                          f"it is checked by accuracy at equal epochs (exact strategies: {', '.join(CHECKS)})")
    return CHECKS[strategy]
