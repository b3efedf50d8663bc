"""Typed strategy options: each strategy declares its options once, as a small frozen dataclass.

A strategy class names its options class (``Strategy.Options``); every field carries its help,
default and limits (:func:`option`)::

    @dataclass(frozen=True)
    class SplitOptions(MiniBatchOptions):
        split_group_size: int | None = option(None, "ranks per split group (GSplit §6.4)", minimum=1)

:meth:`StrategyOptions.parse` turns what a user wrote (YAML values, ``--opt key=value`` strings)
into that dataclass once, in the launching process, and fails in one line naming the option:
an unknown key, a value of the wrong kind, a value out of range.  The parsed object is what
ranks and sampler processes receive; nothing parses the mapping again.  A field may have
``aliases`` (the symbols a paper uses, e.g. HEC's ``cs``) and a command-line ``flag`` of its
own (``--no-pipeline``), which ``gnnflow train`` derives from the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gnnflow.errors import ConfigError

TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def option_bool(value: Any, name: str | None = None) -> bool:
    """An option value as a bool (``--opt key=true`` arrives as a string: true for
    ``TRUE_WORDS``).  With ``name``, a word in neither ``TRUE_WORDS`` nor ``FALSE_WORDS`` is a
    ConfigError naming ``--opt name``; without, it reads as false."""
    if not isinstance(value, str):
        return bool(value)
    word = value.strip().lower()
    if name is not None and word not in TRUE_WORDS + FALSE_WORDS:
        raise ConfigError(f"--opt {name}={value}: true or false")
    return word in TRUE_WORDS


def option(default: Any, help: str, *, choices: Sequence[Any] | None = None, minimum: float | None = None,
           aliases: Sequence[str] = (), flag: str | None = None, flag_value: Any = None) -> Any:
    """A field of a :class:`StrategyOptions` subclass.

    ``choices``: the allowed values; ``minimum``: the least value of a number; ``aliases``: other
    keys that name it; ``flag``: a ``gnnflow train`` flag that sets it (to ``flag_value``, or to
    the value it is given when ``flag_value`` is None)."""
    meta = {"help": help, "choices": tuple(choices) if choices else None, "minimum": minimum,
            "aliases": tuple(aliases), "flag": flag, "flag_value": flag_value}
    if isinstance(default, list | dict):
        raise TypeError("option defaults are immutable: use a tuple")
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class StrategyOptions:
    """Options every strategy has; subclasses add their own (and may change a default)."""

    #: the strategy these options belong to, named in error messages
    strategy: ClassVar[str] = "this strategy"

    stop_after_epoch: int | None = option(
        None, "test hook: end the run right after this epoch's checkpoint, as if it had been killed there",
        minimum=0)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | StrategyOptions | None, strategy: str | None = None) -> Any:
        """``raw`` as an instance of ``cls`` (an instance of ``cls`` itself is returned as is)."""
        if isinstance(raw, cls):
            return raw
        if isinstance(raw, StrategyOptions):
            raw = raw.to_dict()
        who = strategy or cls.strategy
        fields = {f.name: f for f in dataclasses.fields(cls)}
        names = {a: f.name for f in fields.values() for a in f.metadata.get("aliases", ())}
        names.update({n: n for n in fields})
        values: dict[str, Any] = {}
        for key, value in dict(raw or {}).items():
            name = names.get(str(key))
            if name is None:
                known = ", ".join(sorted(fields))
                raise ConfigError(f"options.{key}: not an option of strategy {who}; its options are {known}")
            if name in values:
                raise ConfigError(f"options.{key}: given twice (also as {name})")
            values[name] = _convert(fields[name], value, str(key))
        obj = cls(**values)
        obj.check()
        return obj

    @classmethod
    def names(cls) -> set[str]:
        """Every key that names one of these options (aliases included)."""
        return {n for f in dataclasses.fields(cls) for n in (f.name, *f.metadata.get("aliases", ()))}

    @classmethod
    def own(cls, raw: Mapping[str, Any] | None) -> dict[str, Any]:
        """The entries of ``raw`` that are options of this class: what a run of this strategy gets
        from options written for several (a workflow sweep over strategies, a comparison)."""
        names = cls.names()
        return {k: v for k, v in dict(raw or {}).items() if k in names}

    def check(self) -> None:
        """Checks across options (subclasses); raise ConfigError naming the option."""

    def to_dict(self) -> dict[str, Any]:
        """Every option with its value, as plain YAML/JSON values."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self)}

    @classmethod
    def describe(cls) -> list[tuple[str, Any, str]]:
        """``(name, default, help)`` of every option (``--help`` and the docs' tables)."""
        return [(f.name, f.default, f.metadata.get("help", "")) for f in dataclasses.fields(cls)]


def _convert(f: dataclasses.Field[Any], value: Any, key: str) -> Any:
    """``value`` as the type of field ``f`` (annotations are strings under postponed evaluation)."""
    kind = str(f.type).replace(" ", "")
    optional = kind.endswith("|None")
    base = kind.removesuffix("|None")
    meta = f.metadata
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("none", "null", "auto")):
        if optional:
            return None
        raise ConfigError(f"options.{key}: a value is required")
    try:
        if base == "bool":
            out: Any = option_bool(value, key)
        elif base == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            out = int(value)
        elif base == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            out = float(value)
        elif base == "str":
            out = str(value)
        elif base.startswith("tuple[int"):
            items = value.split(",") if isinstance(value, str) else list(value)
            out = tuple(int(x) for x in items)
        else:  # pragma: no cover - a new option type: extend this table
            raise TypeError(f"option {f.name}: unsupported type {kind}")
    except (TypeError, ValueError):
        want = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string"}.get(
            base, "comma-separated integers like 25,5,1")
        raise ConfigError(f"options.{key}: expected {want}, got {value!r}") from None
    if meta.get("choices") and out not in meta["choices"]:
        raise ConfigError(f"options.{key}: one of {', '.join(map(str, meta['choices']))}, got {value!r}")
    minimum = meta.get("minimum")
    if minimum is not None:
        low = [out] if not isinstance(out, tuple) else list(out)
        if any(v < minimum for v in low):
            raise ConfigError(f"options.{key}: must be >= {minimum:g}, got {value!r}")
    return out
