"""gnnflow: end-to-end pipelines for distributed GNN training strategies."""

import os as _os

# DGL reads this at import; every gnnflow entry point imports this package first.
_os.environ.setdefault("DGLBACKEND", "pytorch")
_os.environ.setdefault("OUTDATED_IGNORE", "1")

__version__ = "0.1.0"
