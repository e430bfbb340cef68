"""A small renderer for the subset of Helm's Go templates that deploy/helm/gateway uses.

No helm binary here, so the tests render the chart with this and parse the output as YAML. It
is strict where Helm is lenient, so that a template it renders is one Helm renders the same:
an action, function or field it does not know raises `TemplateError` (Helm prints an empty
string for a missing value), as does printing a number of a million or more (Helm's values
are float64, printed as 1e+06). The subset:

- text; `{{ pipeline }}`; `{{-` / `-}}` trimming; `{{/* comments */}}`;
- `define`, `if` / `else`, `range` (over a list), `with` / `else`, `end`;
- values: `.`, `.A.b`, `$`, `$.A.b`, "strings", integers, true, false;
- pipelines `a | f x` (the value is the last argument) of: include, toYaml, nindent, indent,
  quote, default, trunc, trimSuffix, printf (%s and %d), sha256sum, eq, not.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(- )?(.*?)( -)?\}\}", re.DOTALL)


class TemplateError(Exception):
    pass


@dataclass
class _Node:
    kind: str  # text, action, if, range, with
    value: str = ""
    body: list[_Node] = field(default_factory=list)
    orelse: list[_Node] = field(default_factory=list)


def _tokens(source: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", s), with the trimming markers applied to the texts."""
    out: list[tuple[str, str]] = []
    position = 0
    trim_next = False
    for match in _ACTION.finditer(source):
        text = source[position : match.start()]
        if trim_next:
            text = text.lstrip()
        if match.group(1):
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", match.group(2).strip()))
        trim_next = bool(match.group(3))
        position = match.end()
    tail = source[position:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


class Chart:
    """A chart directory: its templates parsed, its values and metadata loaded."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        meta = yaml.safe_load((directory / "Chart.yaml").read_text())
        self.chart = {
            "Name": meta["name"],
            "Version": meta["version"],
            "AppVersion": meta["appVersion"],
        }
        self.values = yaml.safe_load((directory / "values.yaml").read_text())
        self.defines: dict[str, list[_Node]] = {}
        self.templates: dict[str, list[_Node]] = {}
        for path in sorted((directory / "templates").iterdir()):
            nodes = self._parse(path.read_text(), path.name)
            if not path.name.startswith("_") and path.suffix in (".yaml", ".yml"):
                self.templates[path.name] = nodes

    def render(self, release: str = "demo", values: dict[str, Any] | None = None) -> dict[str, str]:
        """Each template's output, by file name, for `release` with `values` over the chart's."""
        merged = _merge(self.values, values or {})
        root = {
            "Values": merged,
            "Chart": self.chart,
            "Release": {"Name": release, "Namespace": "default", "Service": "Helm"},
        }
        return {name: self._run(nodes, root, root) for name, nodes in self.templates.items()}

    def documents(
        self, release: str = "demo", values: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Every rendered manifest, parsed (empty documents dropped)."""
        docs: list[dict[str, Any]] = []
        for text in self.render(release, values).values():
            docs.extend(d for d in yaml.safe_load_all(text) if d is not None)
        return docs

    # -- parsing ---------------------------------------------------------------------------

    def _parse(self, source: str, name: str) -> list[_Node]:
        stack: list[tuple[_Node, list[_Node]]] = []  # (block, the list being filled)
        top: list[_Node] = []
        current = top
        for kind, text in _tokens(source):
            if kind == "text":
                if text:
                    current.append(_Node("text", text))
                continue
            if text.startswith("/*"):
                if not text.endswith("*/"):
                    raise TemplateError(f"{name}: unclosed comment")
                continue
            word, _, rest = text.partition(" ")
            if word in ("if", "range", "with", "define"):
                block = _Node(word, rest.strip())
                current.append(block)
                stack.append((block, current))
                current = block.body
            elif word == "else":
                if not stack or stack[-1][0].kind not in ("if", "with") or rest:
                    raise TemplateError(f"{name}: unsupported else: {text!r}")
                current = stack[-1][0].orelse
            elif word == "end":
                block, current = stack.pop()
                if block.kind == "define":
                    current.remove(block)
                    self.defines[_string(block.value)] = block.body
            else:
                current.append(_Node("action", text))
        if stack:
            raise TemplateError(f"{name}: {len(stack)} block(s) without end")
        return top

    # -- evaluation ------------------------------------------------------------------------

    def _run(self, nodes: list[_Node], dot: Any, root: Any) -> str:
        out = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.value)
            elif node.kind == "action":
                out.append(_print(self._pipeline(node.value, dot, root)))
            elif node.kind == "if":
                chosen = node.body if _truth(self._pipeline(node.value, dot, root)) else node.orelse
                out.append(self._run(chosen, dot, root))
            elif node.kind == "with":
                value = self._pipeline(node.value, dot, root)
                if _truth(value):
                    out.append(self._run(node.body, value, root))
                else:
                    out.append(self._run(node.orelse, dot, root))
            elif node.kind == "range":
                items = self._pipeline(node.value, dot, root)
                if not isinstance(items, list):
                    raise TemplateError(f"range over a non-list: {node.value!r}")
                out.extend(self._run(node.body, item, root) for item in items)
        return "".join(out)

    def _pipeline(self, text: str, dot: Any, root: Any) -> Any:
        value: Any = None
        for position, command in enumerate(_split_pipes(text)):
            words = shlex.split(command, posix=False)
            args = [w for w in words[1:]]
            if words[0] in self._functions():
                values = [self._value(a, dot, root) for a in args]
                if position:
                    values.append(value)
                value = self._call(words[0], values, dot, root)
            elif position == 0 and len(words) == 1:
                value = self._value(words[0], dot, root)
            else:
                raise TemplateError(f"unknown function or command: {command!r}")
        return value

    def _functions(self) -> dict[str, Callable[..., Any]]:
        return {
            "include": lambda name, ctx: self._run(self.defines[name], ctx, ctx),
            "toYaml": lambda v: yaml.safe_dump(v, default_flow_style=False).rstrip("\n"),
            "nindent": lambda n, s: "\n" + _indent(n, s),
            "indent": _indent,
            "quote": lambda v: '"' + _print(v).replace("\\", "\\\\").replace('"', '\\"') + '"',
            "default": lambda d, v: v if _truth(v) else d,
            "trunc": lambda n, s: s[:n],
            "trimSuffix": lambda suffix, s: s.removesuffix(suffix),
            "printf": lambda f, *a: f % a,
            "sha256sum": lambda s: hashlib.sha256(s.encode()).hexdigest(),
            "eq": lambda a, b: a == b,
            "not": lambda v: not _truth(v),
        }

    def _call(self, name: str, args: list[Any], dot: Any, root: Any) -> Any:
        try:
            return self._functions()[name](*args)
        except (TypeError, KeyError) as exc:
            raise TemplateError(f"{name}{tuple(args)!r}: {exc}") from exc

    def _value(self, word: str, dot: Any, root: Any) -> Any:
        if word.startswith('"'):
            return _string(word)
        if re.fullmatch(r"-?[0-9]+", word):
            return int(word)
        if word in ("true", "false"):
            return word == "true"
        if word == ".":
            return dot
        if word.startswith("$"):
            base, path = root, word[1:]
        elif word.startswith("."):
            base, path = dot, word
        else:
            raise TemplateError(f"unknown value: {word!r}")
        for part in path.split(".")[1:] if path else []:
            if not isinstance(base, dict) or part not in base:
                raise TemplateError(f"no field {part!r} in {word!r}")
            base = base[part]
        return base


def _split_pipes(text: str) -> list[str]:
    parts, current, quoted = [], "", False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "|" and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


def _string(word: str) -> str:
    if not (len(word) >= 2 and word[0] == word[-1] == '"'):
        raise TemplateError(f"not a string literal: {word!r}")
    return word[1:-1]


def _indent(n: int, text: str) -> str:
    pad = " " * n
    return pad + text.replace("\n", "\n" + pad)


def _truth(value: Any) -> bool:
    return value not in (None, False, 0, "") and value != {} and value != []


def _print(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and abs(value) >= 1_000_000:
        raise TemplateError(f"{value} would print as a float in exponent form under Helm")
    if isinstance(value, dict | list) or value is None:
        raise TemplateError(f"printing {value!r}: use toYaml")
    return str(value)


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base.get(key), value)
        return merged
    return override
