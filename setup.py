"""Builds the C kernels (the memory-bounded METIS path's, the sampler's draws); everything else is in pyproject.toml.

``gnnflow.partition._lpkernels`` (src/gnnflow/partition/_lpkernels.c) is plain C
called through ctypes, packaged as an extension module so that pip compiles it
at install time when a C compiler and the Python headers are present
(``optional``: without them the install still succeeds and ``--coarsen auto``
falls back to plain METIS, saying so).  ``gnnflow.sampling._drawkernels``
(src/gnnflow/sampling/_drawkernels.c) is Floyd's choice of a row's neighbours, the
sampler's inner loop; without it the numpy form draws the same neighbours, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gnnflow.partition._lpkernels", sources=["src/gnnflow/partition/_lpkernels.c"],
                             extra_compile_args=["-O2"], optional=True),
                   # -ffp-contract=off: the draws' float products are exactly numpy's (no fused multiply-add)
                   Extension("gnnflow.sampling._drawkernels", sources=["src/gnnflow/sampling/_drawkernels.c"],
                             extra_compile_args=["-O2", "-ffp-contract=off"], optional=True)])
