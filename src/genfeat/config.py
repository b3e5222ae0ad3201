"""Typed dataclass configs with YAML as their serialisation.

Configs are dataclasses derived from :class:`Config`, whose fields carry docstrings and whose
``__post_init__`` checks values. :class:`Config` checks every field against its annotation (a
``Literal`` among its values, an ``int`` an integer...) before the class's own checks, however
the config is built. :func:`from_dict` builds one from a mapping, checking every field name and
type; an unknown field or a wrong type raises :class:`~genfeat.errors.ConfigError` naming the
dotted path. A section a recipe writes keeps the method's defaults for the fields it leaves out
(``train: {eval_every: 500}`` changes one field of the method's ``train``, not the whole section).
:func:`apply_overrides` applies command-line overrides such as ``--train.lr 3e-4`` (a mapping value,
``--train "{lr: 3e-4}"``, is merged into its section); :func:`dotted` turns a nested mapping of overrides
(a recipe's own) into that form. :func:`load_yaml` reads a recipe, refusing a key written twice.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

from .errors import ConfigError, with_article

T = TypeVar("T")


def _type_name(tp: Any) -> str:
    if get_origin(tp) in (Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _section_type(tp: Any) -> Any:
    """The dataclass a field annotated ``tp`` holds as a section: ``tp`` itself, or the one dataclass of a union
    such as ``Section | None``; None for any other annotation."""
    if dataclasses.is_dataclass(tp):
        return tp
    if get_origin(tp) in (Union, types.UnionType):
        sections = [a for a in get_args(tp) if dataclasses.is_dataclass(a)]
        if len(sections) == 1:
            return sections[0]
    return None


def _coerce(value: Any, tp: Any, path: str, default: Any = None) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert where it is lossless; a section (a mapping for
    a dataclass ``tp``) keeps the values of ``default``, the field's default, for the fields it does not write."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        section = _section_type(tp)
        if isinstance(value, dict) and section is not None and set(args) <= {section, type(None)}:
            return _coerce(value, section, path, default)  # an optional section: errors name the field inside it
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, path)
            except ConfigError:
                pass
        raise ConfigError(f"config field '{path}' has value {value!r}, expected {_type_name(tp)}",
                          f"set '{path}' to a value of type {_type_name(tp)}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"config field '{path}' has value {value!r}, expected one of {list(get_args(tp))}",
                              f"set '{path}' to one of {list(get_args(tp))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config field '{path}' has value {value!r}, expected a list",
                              f"write '{path}' as a YAML list, e.g. [1, 2]")
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigError(f"config field '{path}' needs {len(args)} items, got {len(value)}",
                                  f"give '{path}' exactly {len(args)} items")
            return tuple(_coerce(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        out = [_coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config field '{path}' has value {value!r}, expected a mapping",
                              f"write '{path}' as a YAML mapping")
        _, vt = get_args(tp) or (Any, Any)
        return {k: _coerce(v, vt, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config section '{path}' has value {value!r}, expected a mapping",
                              f"write '{path}' as a YAML mapping of its fields")
        return from_dict(tp, value, path, default if isinstance(default, tp) else None)
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads 3e-4 (no dot) as a string.
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config field '{path}' has value {value!r}, expected a number",
                              f"set '{path}' to a number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"config field '{path}' has value {value!r}, expected an integer",
                              f"set '{path}' to an integer")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config field '{path}' has value {value!r}, expected true or false",
                              f"set '{path}' to true or false")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config field '{path}' has value {value!r}, expected a string",
                              f"set '{path}' to a string")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"config field '{path}' has value {value!r}, expected {_type_name(tp)}",
                          f"set '{path}' to {with_article(_type_name(tp))}")
    return value


def check_fields(cfg: Any) -> None:
    """Check every init field of the dataclass ``cfg`` against its annotation, in place.

    Values are converted where that is lossless, as :func:`from_dict` does (an int for a float
    field, a list for a tuple, a mapping for a nested config).

    Raises:
        ConfigError: a value of another type, or a ``Literal`` field set to none of its values,
            naming ``ClassName.field``.
    """
    cls = type(cfg)
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.init:
            value = _coerce(getattr(cfg, f.name), hints[f.name], f"{cls.__name__}.{f.name}")
            object.__setattr__(cfg, f.name, value)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


class Config:
    """Base class of every config dataclass: :func:`check_fields` runs before the class's own
    ``__post_init__``, so a config built in Python (``TransformerXLConfig(attn_type="relativ")``)
    is refused like one read from YAML, by one check for all classes."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is None:
            return

        @functools.wraps(own)
        def __post_init__(self):
            check_fields(self)
            own(self)

        cls.__post_init__ = __post_init__

    def __post_init__(self):
        check_fields(self)


def check_least(cfg: Any, **least: float) -> None:
    """Refuse a numeric field of ``cfg`` below its least allowed value: ``check_least(self, max_len=5)``.

    Raises:
        ValueError: naming the first such field, its value and the least value (:func:`from_dict`
            turns it into a ConfigError naming the section).
    """
    for name, bound in least.items():
        value = getattr(cfg, name)
        if value < bound:
            raise ValueError(f"{name} is {value}, but must be >= {bound:g}")


class UnknownFieldError(ConfigError):
    """A config field its section does not have: ``key`` in the section at dotted ``section`` ("" for the top
    level); ``close``: the fix already names a near spelling."""

    def __init__(self, cause: str, fix: str, key: str, section: str, close: bool):
        super().__init__(cause, fix)
        self.key, self.section, self.close = key, section, close


def from_dict(cls: type[T], data: dict[str, Any] | None, path: str = "", base: Any = None) -> T:
    """Build the dataclass ``cls`` from ``data``, checking names and types recursively.

    A section ``data`` writes keeps, for the fields it does not write, the values of the section's default in
    its parent class (a method's own ``train`` or ``optim`` defaults, say), not the section class's bare
    defaults: ``train: {eval_every: 500}`` changes one field of the method's ``train``, as the override
    ``--train.eval_every 500`` does. ``base``: the instance of ``cls`` whose values the fields ``data`` does not
    write take (None: ``cls``'s own defaults).

    Raises:
        ConfigError: for an unknown field (with the closest known name, or the other section that has
            it), a wrong type, or a value rejected by the class's ``__post_init__``.
    """
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config section '{path or cls.__name__}' is {with_article(type(data).__name__)} ({data!r:.40}), "
                          "not a mapping of fields", f"write '{path or cls.__name__}' as field: value pairs")
    data = dict(data or {})
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        dotted = f"{path}.{key}" if path else key
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"did you mean '{(path + '.') if path else ''}{close[0]}'?" if close else \
                f"known fields of {cls.__name__}: {', '.join(sorted(fields))}"
            raise UnknownFieldError(f"unknown config field '{dotted}'", hint, key, path, bool(close))
        try:
            kwargs[key] = _coerce(value, hints[key], dotted,
                                  getattr(base, key) if base is not None else _field_default(cls, key))
        except UnknownFieldError as e:
            # a field written in the wrong top-level section of a recipe (train.lr for optim.lr): name the one
            # it is in (not for deeper sections, whose siblings are not these)
            homes = [] if path or e.close or e.section != key else [
                f"{name}.{e.key}" for name, tp in hints.items() if name in fields
                for section in [_section_type(tp)] if section and e.key in {f.name for f in dataclasses.fields(section)}]
            if not homes:
                raise
            raise UnknownFieldError(e.cause, f"'{e.key}' is a field of another section: did you mean "
                                             f"{' or '.join(repr(h) for h in homes)}?", e.key, e.section, True) from None
    if base is not None:
        kwargs = {**{name: getattr(base, name) for name in fields}, **kwargs}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        where = f"section '{path}'" if path else cls.__name__
        raise ConfigError(f"invalid config in {where}: {e}", "correct the value named above") from None


def to_dict(cfg: Any) -> Any:
    """The plain-data (YAML-ready) form of a config."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first: int, again: int):
        self.key = key
        self.where = f"line {first}" if first == again else f"lines {first} and {again}"


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping writing one key twice, where PyYAML keeps the last value
    silently (a recipe with two ``model:`` sections would lose the first). Merge keys (``<<``) may still be
    overridden, as YAML means them to be."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # PyYAML writes the merged keys into node.value in place (also of a mapping merged into another one
        # before its own turn): keep the keys the mapping itself writes, which alone must be unique
        if not hasattr(node, "own_keys"):
            node.own_keys = [key for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge"]
        super().flatten_mapping(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        own = getattr(node, "own_keys", None)
        for key_node in own if own is not None else (key for key, _ in node.value):
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(key, seen[key], line)
                seen[key] = line
            except TypeError:                       # an unhashable key: SafeLoader refuses it itself
                continue
        return super().construct_mapping(node, deep)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML config file holds.

    Raises:
        ConfigError: a file that does not exist, is not UTF-8 text, is not valid YAML, writes a key
            twice in one mapping, or does not hold a mapping; each naming the file.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file '{path}' is a folder", "pass the path of a YAML file (a recipe), e.g. "
                          "recipes/transformer_xl/debug.yaml")
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist", "pass the path of an existing YAML file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file '{path}' is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})",
                          "save the file as UTF-8") from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)
    except _DuplicateKey as e:
        raise ConfigError(f"config file '{path}' writes key '{e.key}' twice in one mapping ({e.where})",
                          f"keep one '{e.key}' entry") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file '{path}' is not valid YAML ({str(e).splitlines()[0]})",
                          "fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' does not hold a mapping", "write the config as YAML key: value pairs")
    return data


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """Parse ``['--train.lr', '3e-4', '--model.n_layer=4']`` into ``{'train.lr': 3e-4, ...}``.

    Values are read as YAML scalars, so ``3e-4`` is a float, ``true`` a bool and ``[1, 2]`` a list.
    """
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) < 3:
            raise ConfigError(f"unexpected argument '{arg}'", "write overrides as --section.field VALUE")
        key = arg[2:]
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"override '{arg}' has no value", f"write {arg} VALUE")
            raw = args[i + 1]
            i += 2
        out[key] = _scalar(raw)
    return out


def _scalar(raw: str) -> Any:
    """A command-line value read as YAML, with ``3e-4`` (a string to YAML 1.1) read as a float and an empty value
    as the empty string (YAML reads it as null; ``null`` or ``~`` say that)."""
    if raw == "":
        return ""
    try:
        value = yaml.load(raw, Loader=UniqueKeyLoader)
    except _DuplicateKey as e:
        raise ConfigError(f"override value '{raw}' writes key '{e.key}' twice", f"keep one '{e.key}' entry") from None
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _field_default(cls: Any, name: str) -> Any:
    """The default of dataclass ``cls``'s init field ``name`` (its factory called), or None without one."""
    if not dataclasses.is_dataclass(cls):
        return None
    for f in dataclasses.fields(cls):
        if f.name == name and f.init:
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            return None if f.default is dataclasses.MISSING else f.default
    return None


def dotted(overrides: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The leaves of a nested mapping as dotted keys, the form :func:`apply_overrides` takes:
    ``{"steps": 3, "data": {"vocab_size": 900}}`` -> ``{"steps": 3, "data.vocab_size": 900}``; keys that are
    dotted already stay so. A mapping is merged into the section it names, never set whole (an empty one
    changes nothing)."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(dotted(value, f"{path}."))
        else:
            out[path] = value
    return out


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys of ``overrides`` into a copy of the nested mapping ``data``.

    A mapping value is merged into the section it names, recursively, as its dotted leaves would be
    (``--model "{d_model: 8}"`` is ``--model.d_model 8``: the section's other fields stay as the recipe
    writes them); any other value replaces what is there. A section on an override's path that ``data`` does
    not write is added with the override's fields alone: :func:`from_dict` fills the rest from the method's
    defaults (``--train.eval_every 0`` changes one field of the method's own ``train``).
    """
    import copy

    data = copy.deepcopy(data)
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = _section(node, part)
            if not isinstance(node, dict):
                raise ConfigError(f"override '--{dotted}': '{part}' is a value, not a section",
                                  "override a field inside a section, e.g. --train.lr")
        _merge(node, parts[-1], value)
    return data


def _section(node: dict[str, Any], key: str) -> Any:
    """``node[key]``, added as an empty section where ``node`` does not write it (or writes null)."""
    if node.get(key) is None:
        node[key] = {}
    return node[key]


def _merge(node: dict[str, Any], key: str, value: Any) -> None:
    """Set ``node[key]`` to ``value``, merging a mapping into the mapping there (recursively)."""
    if isinstance(value, dict):
        child = _section(node, key)
        if isinstance(child, dict):
            for k, v in value.items():
                _merge(child, k, v)
            return
    node[key] = value
