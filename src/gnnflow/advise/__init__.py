"""``gnnflow advise``: which strategy to use for a graph on a cluster, predicted from calibrated
cost models and checked against measured runs (issue 35, docs/advise.md).

* :mod:`gnnflow.advise.counts` — what each strategy's ranks do in one epoch, counted before
  training (a short sampling probe with the strategies' own keyed draws, the partition book);
* :mod:`gnnflow.advise.calibrate` — the machine's rates (``gnnflow advise --calibrate``);
* :mod:`gnnflow.advise.cost` — epoch time per strategy: stage counts x calibrated rates;
* :mod:`gnnflow.advise.advice` — the candidates (strategies and their main options), the memory
  preflight, the ranking and its table;
* :mod:`gnnflow.advise.measure` — one short measured epoch per candidate (``--measure K``);
* :mod:`gnnflow.advise.report` — ``advice.md`` and its figure for the workflow's report.
"""
