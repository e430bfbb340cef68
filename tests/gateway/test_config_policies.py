"""`[[guardrails]]`, `[cache]` and a model's cache and mirror settings: defaults, and every
refusal naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config

BASE = """
[[providers]]
name = "p"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"

[[models]]
id = "m"
provider = "p"

[[models]]
id = "n"
provider = "p"
"""


def load(tmp_path: Path, toml: str) -> object:
    path = tmp_path / "gateway.toml"
    path.write_text(BASE + toml)
    return load_config(path, environ={})


def test_defaults_and_a_full_guardrail(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[[guardrails]]
name = "pii"
kind = "pii"

[[guardrails]]
name = "mod"
kind = "moderation"
provider = "p"
upstream = "omni"
thresholds = { violence = 0.4 }
""",
    )
    pii, mod = config.guardrails  # type: ignore[attr-defined]
    assert pii.stages == ("input",) and pii.action == "block" and pii.models == ("*",)
    assert pii.on_error == "fail_closed" and "credit_card" in pii.entities
    assert mod.threshold("violence") == 0.4 and mod.threshold("hate") is None
    assert pii.threshold("anything") == 0.5  # no thresholds at all: every category at 0.5
    assert config.cache.enabled is False and config.cache.mode == "exact"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("toml", "key", "words"),
    [
        ('[[guardrails]]\nname = "a b"\nkind = "pii"\n', "guardrails[0].name", ""),
        ('[[guardrails]]\nname = "x"\nkind = "other"\n', "guardrails[0].kind", ""),
        ('[[guardrails]]\nname = "x"\nkind = "moderation"\n', "guardrails[0].provider", "required"),
        (
            '[[guardrails]]\nname = "x"\nkind = "injection"\naction = "redact"\n',
            "guardrails[0].action",
            "pii",
        ),
        ('[[guardrails]]\nname = "x"\nkind = "pii"\nstages = []\n', "guardrails[0].stages", ""),
        (
            '[[guardrails]]\nname = "x"\nkind = "pii"\n[[guardrails]]\nname = "x"\nkind = "pii"\n',
            "guardrails[1].name",
            "duplicate",
        ),
        (
            '[[guardrails]]\nname = "x"\nkind = "moderation"\nprovider = "q"\nupstream = "u"\n',
            "guardrails[0].provider",
            "no provider",
        ),
        (
            '[[guardrails]]\nname = "x"\nkind = "pii"\nmodels = ["nope"]\n',
            "guardrails[0].models[0]",
            "not the id",
        ),
        (
            '[[guardrails]]\nname = "x"\nkind = "moderation"\nprovider = "p"\nupstream = "u"\n'
            "thresholds = { violence = 1.5 }\n",
            "guardrails[0].thresholds",
            "",
        ),
        ('[cache]\nmode = "semantic"\n', "cache.embeddings_model", "required"),
        ('[cache]\nembeddings_model = "nope"\n', "cache.embeddings_model", "not the id"),
        ('[cache]\nstore = "redis"\n', "cache.store", "redis_url"),
    ],
)
def test_refusals_name_the_key(tmp_path: Path, toml: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, toml)
    assert caught.value.key == key, str(caught.value)
    assert words in str(caught.value)


def test_a_model_s_cache_and_mirrors(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        BASE.replace(
            'id = "m"\nprovider = "p"\n',
            'id = "m"\nprovider = "p"\ncache = true\ncache_ttl_s = 60\n'
            'cache_hit_usd_per_mtok = 0.1\n[[models.mirrors]]\nmodel = "n"\nsample_rate = 0.25\n',
        )
    )
    config = load_config(path, environ={})
    model = config.models[0]
    assert model.cache is True and model.cache_ttl_s == 60
    assert str(model.cache_hit_usd_per_mtok) == "0.1"
    assert model.mirrors[0].model == "n" and model.mirrors[0].sample_rate == 0.25
    path.write_text(BASE + '[[models.mirrors]]\nmodel = "n"\n')  # itself
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.key == "models[1].mirrors[0].model"
