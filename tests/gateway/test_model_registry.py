"""Model resolution and prices: `[[models]]` prices win, the shipped catalogue fills gaps."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gateway.config import ModelConfig, ProviderConfig
from gateway.inference.model_registry import ModelRegistry, require_price
from protocol.errors import APIError
from protocol.price_catalogue import CATALOGUE_DATE, catalogue_price


def provider(name: str, kind: str) -> ProviderConfig:
    return ProviderConfig(name, kind, "http://127.0.0.1:1/v1", None, None)


REGISTRY = ModelRegistry(
    [provider("oa", "openai"), provider("claude", "anthropic"), provider("local", "vllm")],
    [
        ModelConfig("mini", "oa", "gpt-4o-mini"),  # no price: the catalogue's
        ModelConfig(
            "cheap", "oa", "gpt-4o", input_usd_per_mtok=Decimal(1), output_usd_per_mtok=Decimal(2)
        ),
        ModelConfig("llama", "local", "llama-3"),  # not listed anywhere
    ],
)


def test_the_catalogue_prices_listed_models_without_a_configured_price() -> None:
    mini = require_price(REGISTRY.resolve("mini"), output=True)
    assert (mini.input_usd_per_mtok, mini.output_usd_per_mtok) == (Decimal("0.15"), Decimal("0.60"))
    direct = require_price(REGISTRY.resolve("claude/claude-sonnet-4-0"), output=True)
    assert (direct.input_usd_per_mtok, direct.output_usd_per_mtok) == (Decimal(3), Decimal(15))
    embed = require_price(REGISTRY.resolve("oa/text-embedding-3-small"), output=False)
    assert embed.input_usd_per_mtok == Decimal("0.02") and embed.output_usd_per_mtok is None
    assert CATALOGUE_DATE.startswith("20")


def test_a_configured_price_wins_over_the_catalogue() -> None:
    price = require_price(REGISTRY.resolve("cheap"), output=True)
    assert (price.input_usd_per_mtok, price.output_usd_per_mtok) == (Decimal(1), Decimal(2))


@pytest.mark.parametrize("name", ["llama", "local/llama-3", "oa/gpt-unknown", "local/gpt-4o"])
def test_unlisted_models_have_no_price(name: str) -> None:
    with pytest.raises(APIError) as refused:
        require_price(REGISTRY.resolve(name), output=True)
    assert refused.value.status == 400 and refused.value.code == "model_price_unknown"


def test_an_embedding_price_does_not_serve_chat() -> None:
    with pytest.raises(APIError):
        require_price(REGISTRY.resolve("oa/text-embedding-3-small"), output=True)
    assert catalogue_price("openai", "nothing") is None


def test_translations_default_from_the_upstream_name_and_the_config_wins() -> None:
    registry = ModelRegistry(
        [provider("oa", "openai"), provider("local", "vllm")],
        [
            ModelConfig("whisper", "oa", "whisper-1"),
            ModelConfig("no-translate", "oa", "whisper-1-beta", translations=False),
            ModelConfig("faster", "local", "Systran/faster-whisper-large-v3", translations=True),
            ModelConfig("scribe", "oa", "gpt-4o-transcribe"),
        ],
    )
    translates = {
        name: registry.resolve(name).translations
        for name in (
            *("whisper", "no-translate", "faster", "scribe", "oa/WHISPER-large"),
            *("local/Systran/faster-whisper-large-v3", "local/other"),
        )
    }
    assert translates == {
        "whisper": True,
        "no-translate": False,
        "faster": True,
        "scribe": False,
        "oa/WHISPER-large": True,  # not configured: by its name
        "local/Systran/faster-whisper-large-v3": True,  # the configured entry's setting
        "local/other": False,
    }
