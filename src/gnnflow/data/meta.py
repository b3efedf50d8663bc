"""Typed, versioned ``meta.json`` files: :class:`StoreMeta` of a graph store, the one reader
(:func:`read_store_meta`) and the one writer (:func:`write_store_meta`) of it, the store
fingerprint, and :class:`MetaFile`, the base a partition book's meta
(:mod:`gnnflow.partition.meta`) shares.

A ``meta.json`` is a JSON object with ``format`` (what kind of directory it describes),
``version`` (of that format), typed keys (the dataclass fields) and whatever else a source
adds of its own (``extra``: generator parameters, ``random_features``, ``raw_dir``, ...).
Reading checks all of it once, here, and a problem is one :class:`~gnnflow.errors.StoreError`
line naming the file and what to do; every module then reads attributes, not dict keys.
Writing keeps the keys as they were read (``extra`` included, typed keys a file held as
``null`` included), so ``read -> write -> read`` loses nothing and files stay as earlier
gnnflow versions wrote them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

from gnnflow.errors import StoreError
from gnnflow.io import atomic_file

META_FILE = "meta.json"
#: keys of every meta.json that are no field: they name the format itself
HEADER = ("format", "version")


class MetaFormatError(StoreError):
    """A ``meta.json`` of another format (``found``: its ``format``, None when it has none):
    ``gnnflow check`` tells a store from a book by it."""

    def __init__(self, message: str, found: Any) -> None:
        super().__init__(message)
        self.found = found


@dataclass(kw_only=True)
class MetaFile:
    """Base of the typed ``meta.json`` dataclasses.  A subclass sets the class constants and
    declares its typed keys as fields; those without a default are required."""

    FORMAT: ClassVar[str]
    VERSION: ClassVar[int]
    KIND: ClassVar[str]  # "graph store", for messages
    MAKE: ClassVar[str]  # the command that writes one, for messages

    #: keys a source adds of its own, kept as they are
    extra: dict[str, Any] = field(default_factory=dict)
    #: typed keys the file held as null: written back as null (an absent key stays absent)
    _nulls: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Any, where: str | os.PathLike[str]) -> Self:
        """The typed meta of the JSON object ``data`` read from ``where`` (a file, for messages).
        Raises one StoreError line for another format or version, a missing key or a wrong type."""
        if not isinstance(data, dict) or data.get("format") != cls.FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise MetaFormatError(f"{where}: format is {found!r}, expected {cls.FORMAT!r}: not a "
                                  f"gnnflow {cls.KIND} (make one with `{cls.MAKE}`)", found)
        version = data.get("version")
        if version != cls.VERSION:
            raise StoreError(f"{where}: {_version_problem(cls, version)}")
        values: dict[str, Any] = {}
        nulls = set()
        for name, tp, required in _typed_fields(cls):
            if name not in data:
                if required:
                    raise StoreError(f"{where}: missing key {name!r}; {cls.remedy()}")
                continue
            value = data[name]
            if not _conforms(value, tp):
                raise StoreError(f"{where}: {name} must be {_describe(tp)}, got {_show(value)}; "
                                 f"{cls.remedy()}")
            if value is None:
                nulls.add(name)
            values[name] = value
        typed = {name for name, _, _ in _typed_fields(cls)}
        extra = {k: v for k, v in data.items() if k not in typed and k not in HEADER}
        return cls(**values, extra=extra, _nulls=frozenset(nulls))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this meta: header, typed keys (those set, or read as null), extra."""
        out = {k: v for k, v in self.extra.items() if k not in HEADER}
        for name, _, _ in _typed_fields(type(self)):
            value = getattr(self, name)
            if value is not None or name in self._nulls:
                out[name] = value
        out.update(format=self.FORMAT, version=self.VERSION)
        return out

    def with_keys(self, keys: Mapping[str, Any]) -> Self:
        """A copy with ``keys`` set: typed ones by name (checked), the others into ``extra``."""
        return type(self).from_dict({**self.to_dict(), **keys}, where=f"{self.KIND} meta")

    @classmethod
    def remedy(cls) -> str:
        return f"re-run `{cls.MAKE}` to write it again"


M = TypeVar("M", bound=MetaFile)


def read_meta_file(cls: type[M], path: str | os.PathLike[str]) -> M:
    """``path/meta.json`` as a ``cls`` (nothing else is read); one StoreError line when it is
    not there, not JSON, or not a valid ``cls``."""
    path = Path(path)
    file = path / META_FILE
    if not path.is_dir():
        raise StoreError(f"{path}: no such {cls.KIND} directory (run `{cls.MAKE}` first)")
    if not file.exists():
        raise StoreError(f"{file}: missing; {path} is not a gnnflow {cls.KIND}")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise StoreError(f"{file}: not valid JSON ({exc}); {cls.remedy()}") from None
    except (OSError, ValueError) as exc:  # unreadable, or not UTF-8
        raise StoreError(f"{file}: cannot read ({exc})") from None
    return cls.from_dict(data, file)


def write_meta_file(directory: str | os.PathLike[str], meta: MetaFile) -> Path:
    """Write ``meta`` as ``directory/meta.json`` atomically (a temporary file, then a rename)
    and return its path.  It is checked as a reader would check it first, so a meta no reader
    would accept is refused with nothing written."""
    file = Path(directory) / META_FILE
    data = meta.to_dict()
    type(meta).from_dict(data, file)
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    with atomic_file(file) as tmp:
        tmp.write_text(text)
    return file


@dataclass(kw_only=True)
class StoreMeta(MetaFile):
    """``meta.json`` of a graph store (:mod:`gnnflow.data.store`)."""

    FORMAT: ClassVar[str] = "gnnflow-graph-store"
    VERSION: ClassVar[int] = 1
    KIND: ClassVar[str] = "graph store"
    MAKE: ClassVar[str] = "gnnflow prepare"

    name: str
    num_nodes: int
    num_edges: int
    num_classes: int
    directed: bool
    source: str | None = None
    feature_dim: int | None = None
    num_train: int | None = None
    num_val: int | None = None
    num_test: int | None = None
    node_types: list[str] | None = None
    edge_types: list[list[str]] | None = None
    feature_normalization: str | None = None
    checksums: dict[str, str] | None = None
    fingerprint: str | None = None
    validated: dict[str, Any] | None = None  # the invariants the write-time scan found
    provenance: dict[str, Any] | None = None
    # a homogenized typed graph (gnnflow.data.homogenize)
    homogenized: bool | None = None
    node_type_offsets: list[int] | None = None
    edge_type_offsets: list[int] | None = None
    reverse_edge_types: list[list[str]] | None = None
    num_nodes_per_type: dict[str, int] | None = None
    num_edges_per_type: dict[str, int] | None = None
    target_node_type: str | None = None
    type_feature_dims: dict[str, int] | None = None
    common_features: dict[str, Any] | None = None


def read_store_meta(path: str | os.PathLike[str]) -> StoreMeta:
    """``meta.json`` of the graph store at ``path`` (nothing else is read)."""
    return read_meta_file(StoreMeta, path)


def write_store_meta(directory: str | os.PathLike[str], meta: StoreMeta) -> Path:
    """Write ``meta`` as ``directory/meta.json``, atomically (see :func:`write_meta_file`)."""
    return write_meta_file(directory, meta)


#: meta.json keys that, with the recorded checksums, identify a store's content.
FINGERPRINT_KEYS = ("num_nodes", "num_edges", "num_classes", "feature_dim", "directed")


def store_fingerprint(meta: StoreMeta) -> str | None:
    """sha256 over the counts and the recorded per-file checksums in ``meta``
    (None for a store written without checksums).  Reading it costs one meta.json."""
    sums = meta.checksums
    if not sums:
        return None
    basis: dict[str, Any] = {k: getattr(meta, k) for k in FINGERPRINT_KEYS}
    basis["checksums"] = {f: sums[f] for f in sorted(sums)}
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()


# ----- the type checks ----------------------------------------------------------------------------
@functools.cache
def _typed_fields(cls: type[MetaFile]) -> tuple[tuple[str, Any, bool], ...]:
    """``(name, type, required)`` of each typed key of ``cls``."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING)
                 for f in fields(cls) if f.name not in ("extra", "_nulls"))


def _conforms(value: Any, tp: Any) -> bool:
    """Whether the JSON value ``value`` is of the annotated type ``tp``."""
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:  # JSON's true/false are no counts
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is list or tp is list:
        return isinstance(value, list) and (not args or all(_conforms(v, args[0]) for v in value))
    if origin is dict or tp is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value) and \
            (not args or all(_conforms(v, args[1]) for v in value.values()))
    raise TypeError(f"meta field type {tp!r} has no check")


_NAMES = {bool: ("true or false", "booleans"), int: ("an integer", "integers"),
          float: ("a number", "numbers"), str: ("a string", "strings")}


def _describe(tp: Any, plural: bool = False) -> str:
    """``list[int] | None`` -> ``a list of integers`` (null is allowed wherever a key may be absent)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a, plural) for a in args)
    if tp in _NAMES:
        return _NAMES[tp][plural]
    if typing.get_origin(tp) is list:
        return ("lists of " if plural else "a list of ") + _describe(args[0], plural=True)
    if typing.get_origin(tp) is dict and args[1] is not Any:
        return ("objects of " if plural else "an object of ") + _describe(args[1], plural=True)
    return "objects" if plural else "an object"


def _show(value: Any, width: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _version_problem(cls: type[MetaFile], version: Any) -> str:
    fmt, have = cls.FORMAT, cls.VERSION
    if not isinstance(version, int) or isinstance(version, bool):
        return f"version is {_show(version)}, expected {have} ({fmt}); {cls.remedy()}"
    if version > have:
        return (f"{fmt} version {version} is newer than this gnnflow reads (version {have}); "
                f"upgrade gnnflow, or re-run `{cls.MAKE}` with this one")
    return (f"{fmt} version {version} is older than this gnnflow reads (version {have}); "
            f"{cls.remedy()}")
