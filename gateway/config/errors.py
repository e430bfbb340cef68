"""Where a configuration problem is: `ConfigError` (file, dotted key, problem), and the
translation of msgspec's `ValidationError` ("Expected `int` >= 1 - at `$.server.workers`") into
one, in the gateway's words ("server.workers: must be an integer of at least 1, got 0").

The words come from the type the key has in the schema (`msgspec.inspect`): its constraints, or
the `Meta(description=...)` the schema gives. A value is shown after "got" unless the schema
marks it secret (`extra=SECRET`: only its type for a non-string), and a URL with its password
masked (`extra=URL`).
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from collections.abc import Mapping
from typing import Any

import msgspec
import msgspec.inspect as mi

from gateway.config.schema import Config
from gateway.config.values import FieldProblem, describe, redact_url

ENVIRONMENT = "environment"  # the `file` of a problem with an environment variable
_WHERE = re.compile(r" - at `\$(.*)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_FIELD = re.compile(r"^Object (contains unknown|missing required) field `([^`]+)`")

Path = list[str | int]


class ConfigError(Exception):
    """A bad configuration.

    `str()` is `<file>: <key>: <problem>`; `file` is the config file's path or `environment`, `key`
    a dotted path such as `providers[1].base_url` or an environment variable's name. Problems with
    the file as a whole (not found, TOML syntax) have an empty key and print as `<file>: <problem>`.
    """

    def __init__(self, file: str, key: str, problem: str) -> None:
        super().__init__(file, key, problem)
        self.file = file
        self.key = key
        self.problem = problem

    def __str__(self) -> str:
        if not self.key:
            return f"{self.file}: {self.problem}"
        return f"{self.file}: {self.key}: {self.problem}"


def dotted(path: Path) -> str:
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)[1:]


def steps(key: str) -> Path:
    """`providers[1].base_url` (or `.providers[1]...`, msgspec's) as ["providers", 1, ...].
    A table's value (msgspec's `[...]`, e.g. `thresholds[...]`) is named by its table."""
    key = key.replace("[...]", "")
    found = _STEP.findall(key if key.startswith((".", "[")) or not key else "." + key)
    return [name if name else int(index) for name, index in found]


def translate(
    exc: msgspec.ValidationError,
    file: str,
    raw: object,
    variables: Mapping[str, str],
    root: object = Config,
    prefix: str = "",
) -> ConfigError:
    """`exc`, raised converting `raw` to `root`, as a ConfigError. `variables` maps a dotted key
    to the environment variable that set it: a problem there is the variable's; `prefix` is the
    key of `raw` when it is not the whole file."""
    message = str(exc)
    where = _WHERE.search(message)
    path = steps(where.group(1)) if where else []
    text = message[: where.start()] if where else message
    cause = exc.__cause__
    named = _FIELD.match(text)
    if isinstance(cause, FieldProblem):
        path += steps(cause.key)
        problem = cause.problem
    elif isinstance(cause, ValueError | TypeError):  # from a dec_hook or another __post_init__
        problem = str(cause)
    elif named and named.group(1) == "missing required":
        path.append(named.group(2))
        problem = "is required"
    elif named:
        fields = _fields(_type_at(_info(root), path))
        path.append(named.group(2))
        close = difflib.get_close_matches(named.group(2), fields, n=1)
        problem = "unknown key" + (f' (did you mean "{close[0]}"?)' if close else "")
    else:
        key = dotted(steps(prefix) + path)
        problem = _refused(_type_at(_info(root), path), _value_at(raw, path), key)
    key = dotted(steps(prefix) + path)
    if key in variables:
        return ConfigError(ENVIRONMENT, variables[key], problem)
    return ConfigError(file, key, problem)


@functools.cache
def _info(root: Any) -> mi.Type:
    return mi.type_info(root)


def _value_at(raw: object, path: Path) -> object:
    for step in path:
        if isinstance(step, int) and isinstance(raw, list | tuple) and step < len(raw):
            raw = raw[step]
        elif isinstance(step, str) and isinstance(raw, dict) and step in raw:
            raw = raw[step]
        else:
            return None
    return raw


def _type_at(info: mi.Type, path: Path) -> mi.Type:
    for step in path:
        info = _bare(info)
        if isinstance(info, mi.StructType):
            info = next(f.type for f in info.fields if f.name == step)
        elif isinstance(info, mi.DictType):
            info = info.value_type
        elif isinstance(info, mi.ListType | mi.VarTupleType | mi.FrozenSetType | mi.SetType):
            info = info.item_type
        elif isinstance(info, mi.TupleType) and isinstance(step, int):
            info = info.item_types[step]
    return info


def _bare(info: mi.Type) -> mi.Type:
    """The type without its metadata, and without `None` in an optional."""
    if isinstance(info, mi.Metadata):
        info = info.type
    if isinstance(info, mi.UnionType):
        kinds = [kind for kind in info.types if not isinstance(kind, mi.NoneType)]
        if len(kinds) == 1:
            return _bare(kinds[0])
    return info


def _fields(info: mi.Type) -> list[str]:
    info = _bare(info)
    return sorted(f.name for f in info.fields) if isinstance(info, mi.StructType) else []


def _refused(info: mi.Type, value: object, key: str) -> str:
    """The problem with `value`, which a type or constraint check refused."""
    extra: dict[str, object] = {}
    wanted = None
    for layer in (info, *(getattr(info, "types", ()))):
        if isinstance(layer, mi.Metadata):
            extra.update(layer.extra or {})
            wanted = (layer.extra_json_schema or {}).get("description", wanted)
    bare = _bare(info)
    if isinstance(bare, mi.StrType) and isinstance(value, str) and not value.strip():
        return "must not be empty"
    if isinstance(bare, mi.StrType) and not isinstance(value, str):
        wanted = None  # the description says what string: the problem is not being one
    problem = f"must be {wanted or _words(bare, key)}"
    if extra.get("url") and isinstance(value, str):
        value = redact_url(value)
    if extra.get("secret"):
        return (
            problem if isinstance(value, str) else f"{problem}, got {describe(value, secret=True)}"
        )
    return problem if value is None else f"{problem}, got {describe(value)}"


def _words(info: mi.Type, key: str) -> str:
    """What a value of this type must be, in words."""
    if isinstance(info, mi.IntType):
        if info.ge is not None and info.le is not None:
            return f"an integer from {info.ge} to {info.le}"
        return "an integer" if info.ge is None else f"an integer of at least {info.ge}"
    if isinstance(info, mi.FloatType):
        if info.le == sys.float_info.max and info.gt == 0:
            return "a finite number greater than 0"
        if info.ge is not None and info.le is not None:
            return f"a number from {info.ge:g} to {info.le:g}"
        return "a number"
    if isinstance(info, mi.LiteralType):
        return "one of " + ", ".join(map(str, info.values))
    if isinstance(info, mi.StructType | mi.DictType):
        return "a table" if key.endswith("]") or not key else f"a table ([{key}])"
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.FrozenSetType | mi.SetType):
        tables = isinstance(_bare(info.item_type), mi.StructType)
        return f"an array of tables ([[{key}]])" if tables else "an array"
    names = {mi.BoolType: "true or false", mi.StrType: "a string", mi.DecimalType: "a number"}
    return names.get(type(info), "a different type of value")
