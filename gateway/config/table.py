"""Where a configuration problem is: `ConfigError` (file, dotted key, problem) and `Table`, one
TOML table being read, which knows the keys it was asked for, so any other is a typo."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import TypeVar

import gateway.config.values as values

T = TypeVar("T")
D = TypeVar("D")

ENVIRONMENT = "environment"  # the `file` of a problem with an environment variable
_MISSING = object()


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


class Table:
    """One TOML table being read; the keys it was asked for are known, any others are typos."""

    def __init__(self, file: str, path: str, data: Mapping[str, object]) -> None:
        self._file = file
        self._path = path
        self._data = data
        self._known: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self._path}.{name}" if self._path else name

    def error(self, name: str, problem: str) -> ConfigError:
        return ConfigError(self._file, self.key(name), problem)

    def _take(self, name: str) -> object:
        self._known.add(name)
        return self._data.get(name, _MISSING)

    def get(self, name: str, convert: Callable[[object], T], default: D) -> T | D:
        value = self._take(name)
        return default if value is _MISSING else self._convert(name, value, convert)

    def require(self, name: str, convert: Callable[[object], T]) -> T:
        value = self._take(name)
        if value is _MISSING:
            raise self.error(name, "is required")
        return self._convert(name, value, convert)

    def _convert(self, name: str, value: object, convert: Callable[[object], T]) -> T:
        try:
            return convert(value)
        except values.InvalidValue as exc:
            raise self.error(name, exc.problem) from None

    def get_list(self, name: str, convert: Callable[[object], T]) -> list[T] | None:
        value = self._take(name)
        if value is _MISSING:
            return None
        if not isinstance(value, list):
            raise self.error(name, f"must be an array, got {values.describe(value)}")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(convert(item))
            except values.InvalidValue as exc:
                raise self.error(f"{name}[{index}]", exc.problem) from None
        return items

    def table(self, name: str) -> Table:
        value = self._take(name)
        if value is _MISSING:
            value = {}
        if not isinstance(value, dict):
            got = values.describe(value)
            raise self.error(name, f"must be a table ([{self.key(name)}]), got {got}")
        return Table(self._file, self.key(name), value)

    def tables(self, name: str) -> list[Table]:
        value = self._take(name)
        if value is _MISSING:
            return []
        if not isinstance(value, list):
            raise self.error(name, f"must be an array of tables ([[{self.key(name)}]])")
        found = []
        for index, item in enumerate(value):
            path = f"{self.key(name)}[{index}]"
            if not isinstance(item, dict):
                raise ConfigError(self._file, path, f"must be a table, got {values.describe(item)}")
            found.append(Table(self._file, path, item))
        return found

    @property
    def file(self) -> str:
        return self._file

    @property
    def path(self) -> str:
        return self._path

    def raw(self) -> Mapping[str, object]:
        """The whole table, every key counted as known (the caller validates it)."""
        self._known.update(self._data)
        return self._data

    def finish(self) -> None:
        """Raise for the first key that was never asked for."""
        for name in self._data:
            if name not in self._known:
                close = difflib.get_close_matches(name, sorted(self._known), n=1)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                raise self.error(name, f"unknown key{hint}")
