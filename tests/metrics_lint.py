"""`promtool check metrics`, more or less: /metrics text parsed by prometheus_client's parser,
then Prometheus's naming rules and this gateway's label rules checked on every family.

`lint(text)` returns the families by name (counters without `_total`, as the parser names
them) and raises AssertionError naming the first rule broken.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Collection

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
STATUS_CLASSES = {"1xx", "2xx", "3xx", "4xx", "5xx"}
# Units are base units, spelled out: no milliseconds, no percentages.
BAD_UNITS = re.compile(
    r"_(ms|milliseconds|microseconds|us|percent|kilobytes|megabytes|minutes)(_|$)"
)
FALLBACKS = {"other", "none"}


def lint(
    text: str,
    *,
    models: Collection[str] | None = None,
    providers: Collection[str] | None = None,
) -> dict[str, Metric]:
    """The families of `text`, each checked. `models`/`providers`: the configured ids and
    names, the only `model`/`provider` label values besides `other` and `none`."""
    declared = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(declared) == len(set(declared)), f"a family declared twice: {declared}"
    families: dict[str, Metric] = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in families, f"duplicate family {family.name}"
        families[family.name] = family
        _check_family(family, models, providers)
    return families


def _check_family(
    family: Metric, models: Collection[str] | None, providers: Collection[str] | None
) -> None:
    name = family.name
    assert METRIC_NAME.match(name), f"bad metric name {name!r}"
    assert not BAD_UNITS.search(name), f"{name}: not a base unit"
    assert family.documentation, f"{name}: no HELP"
    if family.type == "counter":
        for sample in family.samples:
            assert sample.name in (f"{name}_total", f"{name}_created"), (
                f"counter sample {sample.name} of {name} does not end in _total"
            )
            assert sample.value >= 0, f"{sample.name}: negative counter"
    else:
        assert not name.endswith("_total"), f"{name}: a {family.type} named like a counter"
    if family.type == "histogram":
        _check_histogram(family)
    for sample in family.samples:
        for label, value in sample.labels.items():
            assert LABEL_NAME.match(label) and not label.startswith("__"), (
                f"{sample.name}: bad label name {label!r}"
            )
            if label == "status_class":
                assert value in STATUS_CLASSES, f"{sample.name}: status_class={value!r}"
            if label == "model" and models is not None:
                assert value in FALLBACKS or value in models, f"{sample.name}: model={value!r}"
            if label == "provider" and providers is not None:
                assert value in FALLBACKS or value in providers, f"{sample.name}: {value!r}"


def _check_histogram(family: Metric) -> None:
    name = family.name
    buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
    counts: dict[tuple[tuple[str, str], ...], float] = {}
    sums: set[tuple[tuple[str, str], ...]] = set()
    for sample in family.samples:
        suffix = sample.name.removeprefix(name)
        assert suffix in ("_bucket", "_sum", "_count", "_created"), f"{sample.name} in {name}"
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        if suffix == "_bucket":
            buckets[labels].append((float(sample.labels["le"]), sample.value))
        elif suffix == "_count":
            counts[labels] = sample.value
        elif suffix == "_sum":
            sums.add(labels)
    assert set(buckets) == set(counts) == sums, f"{name}: series without _bucket/_sum/_count"
    for labels, series in buckets.items():
        bounds = [bound for bound, _ in series]
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds), (
            f"{name}{labels}: le not ordered: {bounds}"
        )
        assert math.isinf(bounds[-1]), f"{name}{labels}: no +Inf bucket"
        values = [value for _, value in series]
        assert values == sorted(values), f"{name}{labels}: buckets not cumulative"
        assert values[-1] == counts[labels], f"{name}{labels}: +Inf bucket != _count"


def value(family: Metric, sample_name: str, **labels: str) -> float:
    """The sum of `family`'s samples called `sample_name` whose labels include `labels`."""
    return sum(
        s.value
        for s in family.samples
        if s.name == sample_name and labels.items() <= s.labels.items()
    )
