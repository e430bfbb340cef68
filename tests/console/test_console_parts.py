"""The console's parts that need no gateway: percentile estimates from
histogram buckets, the origin rule, form parsing and bar geometry."""

from __future__ import annotations

import pytest

from gateway.auth.operator import OperatorKeys
from gateway.console.charts import bar_chart
from gateway.console.figures import instance_figures, quantile
from gateway.console.security import FormError, cookie_value, parse_form, same_origin


def test_quantiles_from_cumulative_buckets() -> None:
    buckets = {0.1: 50.0, 0.5: 90.0, 1.0: 100.0, float("inf"): 100.0}
    assert quantile(buckets, 0.5) == pytest.approx(0.1)
    assert quantile(buckets, 0.7) == pytest.approx(0.3)
    assert quantile(buckets, 0.99) == pytest.approx(0.95)
    assert quantile({0.1: 0.0, float("inf"): 0.0}, 0.5) is None
    assert quantile({}, 0.5) is None
    assert quantile({1.0: 0.0, float("inf"): 10.0}, 0.5) == 1.0  # past the last bound


def test_instance_figures_count_api_routes_only() -> None:
    text = "\n".join(
        [
            "# HELP gateway_requests_total x",
            "# TYPE gateway_requests_total counter",
            'gateway_requests_total{method="POST",route="/v1/chat/completions",'
            'status_class="2xx",model="m",provider="p"} 3',
            'gateway_requests_total{method="GET",route="/v1/admin/actors",'
            'status_class="2xx",model="none",provider="none"} 7',
            'gateway_requests_total{method="GET",route="/console/keys",'
            'status_class="2xx",model="none",provider="none"} 9',
            'gateway_requests_total{method="POST",route="/v1/chat/completions",'
            'status_class="5xx",model="m",provider="p"} 1',
            "# HELP gateway_cache_entries x",
            "# TYPE gateway_cache_entries gauge",
            "gateway_cache_entries 4",
            "# HELP gateway_cache_requests_total x",
            "# TYPE gateway_cache_requests_total counter",
            'gateway_cache_requests_total{outcome="hit"} 2',
            "# HELP gateway_other x",
            "# TYPE gateway_other gauge",
            "gateway_other 1",
            "",
        ]
    )
    figures = instance_figures(text, ("gateway_cache",))
    assert figures.by_status == {"2xx": 3, "5xx": 1} and figures.requests == 4
    assert figures.latency_p50_s is None
    assert figures.gauges == [
        ("gateway_cache_entries", "", 4.0),
        ("gateway_cache_requests_total", "outcome=hit", 2.0),
    ]


@pytest.mark.parametrize(
    ("origin", "site", "host", "ok"),
    [
        (None, None, "h:1", True),
        ("http://h:1", None, "h:1", True),
        ("https://h:1", None, "h:1", True),  # TLS ended by a proxy
        ("http://h:2", None, "h:1", False),
        ("http://evil", None, "h:1", False),
        ("null", None, "h:1", False),
        ("http://h:1", None, None, False),
        ("null", "same-origin", "h:1", True),  # Chromium under no-referrer
        ("http://h:1", "same-site", "h:1", False),
        (None, "cross-site", "h:1", False),
        (None, "none", "h:1", False),
    ],
)
def test_origin_rule(origin: str | None, site: str | None, host: str | None, ok: bool) -> None:
    assert same_origin(origin, site, host) is ok


def test_forms_and_cookies() -> None:
    form = parse_form("application/x-www-form-urlencoded; charset=utf-8", b"a=1&a=2&b=%C3%A9&c=")
    assert form == {"a": "1", "b": "é", "c": ""}
    assert parse_form(None, b"") == {}
    for content_type, body in (
        ("text/plain", b"a=1"),
        ("application/x-www-form-urlencoded", b"a=%ff"),
        ("application/x-www-form-urlencoded", b"a=%01"),
        ("application/x-www-form-urlencoded", b"&".join([b"x=1"] * 60)),
    ):
        with pytest.raises(FormError):
            parse_form(content_type, body)
    assert cookie_value("a=1; gateway_console=abc ; b=2") == "abc"
    assert cookie_value("gateway_console=") is None and cookie_value(None) is None


def test_bar_geometry() -> None:
    chart = bar_chart("t", [("a", 0.0), ("b", 2.0), ("c", 1.0)])
    heights = [b.height for b in chart.bars]
    assert heights[0] == 0 and heights[1] == 2 * heights[2] > 0
    assert all(b.y + b.height == chart.baseline for b in chart.bars)
    assert bar_chart("t", []).bars == ()
    assert [b.height for b in bar_chart("t", [("a", 0.0)]).bars] == [0.0]


def test_an_operator_fingerprint_is_known_while_its_key_is_configured() -> None:
    old, new = "service_op_" + "a" * 32, "service_op_" + "b" * 32
    rotating, rotated = OperatorKeys((old, new)), OperatorKeys((new,))
    fingerprint = rotating.match(old)
    assert fingerprint is not None and rotating.knows(fingerprint)
    assert not rotated.knows(fingerprint)
    assert rotated.knows(rotated.match(new) or "")
    for hostile in ("", "a" * 12, fingerprint.upper(), fingerprint + " "):
        assert not rotated.knows(hostile)
    assert not OperatorKeys(()).knows(fingerprint)
