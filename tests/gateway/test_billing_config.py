"""`[billing] payment_provider` (issue #24): Stripe needs its two secrets from the environment
and never from the file; the test processor is refused with GATEWAY_ENV=production while billing
is on, and every start with it and billing on says loudly that top-ups are not charged."""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path

import pytest

from gateway.config import load_config
from gateway.config.errors import ConfigError
from gateway.credits.processor import TEST_PROCESSOR_WARNING
from services.payments import TestPaymentProcessor
from services.stripe.processor import StripeProcessor
from tests.gateway.test_cli import _env, _gateway, _run
from tests.harness import gateway_config, running_gateway

STRIPE = {"STRIPE_SECRET_KEY": "sk_test_abc123", "STRIPE_WEBHOOK_SECRET": "whsec_abc123"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_stripe_takes_its_secrets_from_the_environment_and_never_prints_them(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, '[billing]\npayment_provider = "stripe"\n')
    config = load_config(path, environ=STRIPE)
    assert config.billing.stripe_secret_key == "sk_test_abc123"
    assert config.billing.stripe_webhook_secret == "whsec_abc123"
    for text in (repr(config), str(config), repr(config.billing)):
        assert "sk_test_abc123" not in text and "whsec_abc123" not in text
    for missing in STRIPE:
        environ = {k: v for k, v in STRIPE.items() if k != missing}
        with pytest.raises(ConfigError) as refused:
            load_config(path, environ=environ)
        assert missing in str(refused.value)
    with pytest.raises(ConfigError) as bad:
        load_config(path, environ={**STRIPE, "STRIPE_SECRET_KEY": "sk_test with space"})
    assert "STRIPE_SECRET_KEY" in str(bad.value) and "with space" not in str(bad.value)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[billing]\nstripe_secret_key = "sk_test_x"\n', "billing.stripe_secret_key"),
        ('[billing]\nstripe_webhook_secret = "whsec_x"\n', "billing.stripe_webhook_secret"),
        ('[billing]\nstripe_api_base = "http://127.0.0.1:1"\n', "billing.stripe_api_base"),
        (
            '[billing]\npayment_provider = "stripe"\nstripe_api_base = "ftp://x"\n',
            "billing.stripe_api_base",
        ),
        ('environment = "production"\n', "environment"),
    ],
)
def test_secrets_and_misplaced_keys_are_refused_in_the_file(
    tmp_path: Path, toml: str, key: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write(tmp_path, toml), environ=STRIPE)
    assert key in str(refused.value)


def test_production_refuses_the_test_processor_while_billing_is_on(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={"GATEWAY_ENV": "production"})
    assert "GATEWAY_ENV" in str(refused.value) and "stripe" in str(refused.value)
    off = load_config(
        write(tmp_path, "[billing]\nenabled = false\n"), environ={"GATEWAY_ENV": "production"}
    )
    assert off.environment == "production"
    stripe = write(tmp_path, '[billing]\npayment_provider = "stripe"\n')
    assert (
        load_config(
            stripe, environ={**STRIPE, "GATEWAY_ENV": "production"}
        ).billing.payment_provider
        == "stripe"
    )
    assert load_config(None, environ={"GATEWAY_ENV": "staging"}).environment == "staging"


async def test_gateway_serve_exits_2_naming_gateway_env(tmp_path: Path) -> None:
    result = await _run(_gateway("serve"), _env(tmp_path, GATEWAY_ENV="production"), tmp_path)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "GATEWAY_ENV" in err and "Traceback" not in err


async def test_a_start_with_the_test_processor_warns_that_top_ups_are_free(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.billing")
    key = base64.b64encode(os.urandom(32)).decode()  # one database: one master key
    on = gateway_config(database_url, tmp_path / "on", GATEWAY_MASTER_KEY=key)
    async with running_gateway(on) as gw:
        assert isinstance(gw.runtime.payments, TestPaymentProcessor)
    warned = [r for r in caplog.records if r.getMessage() == TEST_PROCESSOR_WARNING]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert "NOT charged" in TEST_PROCESSOR_WARNING
    caplog.clear()
    off = gateway_config(
        database_url, tmp_path / "off", toml="[billing]\nenabled = false\n", GATEWAY_MASTER_KEY=key
    )
    async with running_gateway(off):
        pass
    assert not [r for r in caplog.records if r.getMessage() == TEST_PROCESSOR_WARNING]


async def test_with_stripe_there_is_no_warning_and_the_processor_is_stripe(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.billing")
    config = gateway_config(
        database_url,
        tmp_path,
        toml='[billing]\npayment_provider = "stripe"\nstripe_api_base = "http://127.0.0.1:9"\n',
        **STRIPE,
    )
    async with running_gateway(config) as gw:
        assert isinstance(gw.runtime.payments, StripeProcessor)
        assert "sk_test" not in repr(gw.runtime.payments)
    assert not [r for r in caplog.records if r.getMessage() == TEST_PROCESSOR_WARNING]
