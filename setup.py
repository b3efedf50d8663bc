"""Builds the C kernels of the memory-bounded METIS path; everything else is in pyproject.toml.

``gnnflow.partition._lpkernels`` (src/gnnflow/partition/_lpkernels.c) is plain C
called through ctypes, packaged as an extension module so that pip compiles it
at install time when a C compiler and the Python headers are present
(``optional``: without them the install still succeeds and ``--coarsen auto``
falls back to plain METIS, saying so).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gnnflow.partition._lpkernels", sources=["src/gnnflow/partition/_lpkernels.c"],
                             extra_compile_args=["-O2"], optional=True)])
