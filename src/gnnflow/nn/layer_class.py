"""A model given as a layer class (``--model pyg:ConvName | module.path:Name | path/to/file.py:Name``).

The contract (docs/models.md): ``Name(in_dim, out_dim, **model_opts)`` is a ``torch.nn.Module``
whose ``forward(block, h_src)`` maps the ``[num_src, in_dim]`` rows of a block's sources to the
``[num_dst, out_dim]`` rows of its destinations (:class:`~gnnflow.sampling.block.Block`; the
destinations are the first ``num_dst`` sources), and accepts a block without vertices (layer-wise
evaluation asks a layer its output width that way).  :func:`class_layers` builds ``num_layers``
of them (``in -> hidden -> ... -> classes``) and checks each on an empty block, so a layer that
breaks the contract fails once, in one line, before training; :class:`gnnflow.nn.GNN` stacks
them with its activation and dropout, so every layer-wise strategy trains them unchanged.

A file is imported once per process under a name made from its absolute path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gnnflow.config import LAYER_CLASS_FORMS, is_layer_class
from gnnflow.errors import ConfigError
from gnnflow.sampling.block import Block

#: what builds one layer: ``make(in_dim, out_dim) -> module``
LayerFactory = Callable[[int, int], nn.Module]


def layer_factory(spec: str, opts: dict[str, Any] | None = None) -> LayerFactory:
    """``make(in_dim, out_dim)`` for the layer class ``spec`` with keyword options ``opts``
    (one-line errors for an unknown module, file, class or PyG convolution)."""
    if not is_layer_class(spec):
        raise ConfigError(f"model {spec!r}: not a layer class; give {LAYER_CLASS_FORMS} (docs/models.md)")
    where, _, name = spec.rpartition(":")
    opts = dict(opts or {})
    if where == "pyg":
        from gnnflow.nn.pyg import PyGLayer, conv_class

        conv = conv_class(name, spec)
        return lambda d_in, d_out: PyGLayer(conv, d_in, d_out, **opts)
    module = _load_file(where, spec) if where.endswith(".py") else _import(where, spec)
    cls = getattr(module, name, None)
    if cls is None:
        raise ConfigError(f"model {spec}: {where} has no {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"model {spec}: {name} is not a torch.nn.Module class")
    return lambda d_in, d_out: cls(d_in, d_out, **opts)


def _import(module: str, spec: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"model {spec}: no module {exc.name!r} (is it on PYTHONPATH?)") from None
    except Exception as exc:  # the user's module failed while importing
        raise ConfigError(f"model {spec}: importing {module} failed: {type(exc).__name__}: {exc}") from None


def _load_file(path: str, spec: str) -> Any:
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ConfigError(f"model {spec}: no such file {path} (a relative path is read from {Path.cwd()})")
    key = "gnnflow_layers_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    if key in sys.modules:
        return sys.modules[key]
    loader_spec = importlib.util.spec_from_file_location(key, file)
    assert loader_spec is not None and loader_spec.loader is not None
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[key] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[key]
        raise ConfigError(f"model {spec}: importing {path} failed: {type(exc).__name__}: {exc}") from None
    return module


def class_layers(spec: str, dims: Sequence[int], opts: dict[str, Any] | None = None) -> list[nn.Module]:
    """One layer ``dims[i] -> dims[i+1]`` per step, each checked on a block without vertices: it
    must give ``[0, dims[i+1]]`` (one-line errors naming the layer and what went wrong)."""
    make = layer_factory(spec, opts)
    layers = []
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        try:
            layer = make(d_in, d_out)
        except Exception as exc:  # wrong options, a class that takes other arguments
            raise ConfigError(f"model {spec}: building layer {i} as {spec.rpartition(':')[2]}({d_in}, {d_out}"
                              f"{''.join(f', {k}={v!r}' for k, v in (opts or {}).items())}) failed: "
                              f"{type(exc).__name__}: {exc}") from None
        _check_on_empty_block(layer, spec, i, d_in, d_out)
        layers.append(layer)
    return layers


def _check_on_empty_block(layer: nn.Module, spec: str, i: int, d_in: int, d_out: int) -> None:
    was = layer.training
    layer.eval()
    try:
        with torch.no_grad():
            out = layer(Block.empty(), torch.zeros((0, d_in)))
    except Exception as exc:
        raise ConfigError(f"model {spec}: layer {i} fails on a block without vertices ({type(exc).__name__}: "
                          f"{exc}); a layer must accept one (docs/models.md)") from None
    finally:
        layer.train(was)
    shape = tuple(getattr(out, "shape", ()))
    if shape != (0, d_out):
        raise ConfigError(f"model {spec}: layer {i} ({d_in} -> {d_out} features) gives shape {shape} on a block "
                          f"without vertices; it must give [num_dst, {d_out}] (docs/models.md)")
