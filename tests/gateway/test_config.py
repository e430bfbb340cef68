"""Tests for gateway.config: defaults, a full provider example, env overrides, every error class."""

from __future__ import annotations

import base64
import ipaddress
import pickle
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.config import (
    BillingConfig,
    Config,
    ConfigError,
    ModelConfig,
    ProviderConfig,
    ServerConfig,
    WebhooksConfig,
    load_config,
    redact_url,
)

# A provider and a model as an operator writes them, comments and all.
PROVIDER_EXAMPLE = """\
[[providers]]
name = "openai"                 # clients address its models as "openai/<upstream model>"
kind = "openai"                 # wire format: openai (any OpenAI-compatible server), anthropic, cohere, ...
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"  # or api_key = "..."
supports = ["chat", "embeddings", "audio", "images", "fine_tuning", "responses", "rerank"]  # optional

[[models]]                      # optional: aliases and prices
id = "gpt-4o-mini"              # what clients may send as `model`
provider = "openai"
upstream = "gpt-4o-mini"        # what is sent upstream
input_usd_per_mtok = 0.15
output_usd_per_mtok = 0.60
"""  # noqa: E501 -- verbatim, comments included

MASTER_KEY = bytes(range(32))
MASTER_KEY_B64 = base64.b64encode(MASTER_KEY).decode()
BOOTSTRAP_KEY = "service_mgmt_" + "b" * 24
OPERATOR_KEY = "service_op_" + "o" * 21  # 32 characters: the shortest accepted
OPERATOR_KEY2 = "service_op_" + "p" * 40
PROVIDER_KEY = "sk-provider-secret-123456"

PROVIDER = (
    '[[providers]]\nname = "openai"\nkind = "openai"\nbase_url = "https://api.openai.com/v1"\n'
)


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No stray ./gateway.toml from the repository may be picked up.
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str, name: str = "gateway.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str, **environ: str) -> Config:
    return load_config(write(tmp_path, text), environ=environ)


def assert_error(error: ConfigError, file: str, key: str, problem: str) -> None:
    message = str(error)
    assert error.file == file
    assert error.key == key
    assert problem in error.problem
    assert file in message
    assert key in message
    assert problem in message


# --- defaults and where the file comes from ---------------------------------------------------


def test_defaults_without_file_or_environment() -> None:
    config = load_config(environ={})
    assert config == Config(
        source=None,
        database_url="sqlite:///var/gateway.db",
        redis_url=None,
        data_dir=Path("var"),
        master_key=None,
        public_base_url=None,
        bootstrap_management_key=None,
        server=ServerConfig(),
        providers=(),
        models=(),
        webhooks=WebhooksConfig(),
        billing=BillingConfig(),
        log_level="INFO",
    )
    assert config.server == ServerConfig(
        host="127.0.0.1",
        port=8080,
        workers=1,
        graceful_timeout_s=30.0,
        keep_alive_timeout_s=75.0,
        keep_alive_max_requests=1_000_000,
        max_request_body_bytes=1_048_576,
        max_audio_body_bytes=25_000_000,
        max_file_body_bytes=512_000_000,
        max_vision_body_bytes=20_000_000,
        access_log=True,
    )
    assert config.webhooks.allowed_private_networks == ()
    assert config.webhooks.allow_http is False
    assert config.billing.payment_provider == "test"
    assert config.billing.max_auto_topups_per_day == 3


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    config = load_text(tmp_path, "")
    assert config.source == str(tmp_path / "gateway.toml")
    assert config.database_url == "sqlite:///var/gateway.db"
    assert config.providers == ()


def test_gateway_toml_in_working_directory_is_used(tmp_path: Path) -> None:
    write(tmp_path, 'log_level = "DEBUG"\n')
    config = load_config(environ={})
    assert config.source == "gateway.toml"
    assert config.log_level == "DEBUG"


def test_gateway_config_variable_names_the_file(tmp_path: Path) -> None:
    write(tmp_path, 'log_level = "ERROR"\n')  # in the working directory: must lose
    other = write(tmp_path, 'log_level = "WARNING"\n', name="other.toml")
    config = load_config(environ={"GATEWAY_CONFIG": str(other)})
    assert config.source == str(other)
    assert config.log_level == "WARNING"


def test_path_argument_wins_over_gateway_config(tmp_path: Path) -> None:
    chosen = write(tmp_path, 'log_level = "ERROR"\n', name="chosen.toml")
    other = write(tmp_path, 'log_level = "WARNING"\n', name="other.toml")
    config = load_config(chosen, environ={"GATEWAY_CONFIG": str(other)})
    assert config.log_level == "ERROR"


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing, environ={})
    assert caught.value.key == ""
    assert str(caught.value) == f"{missing}: file not found"


def test_missing_gateway_config_file_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"GATEWAY_CONFIG": "conf/missing.toml"})
    assert_error(caught.value, "conf/missing.toml", "", "file not found")


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.file == str(path)
    assert caught.value.key == ""
    assert "line 2" in str(caught.value)


# --- a full example and providers/models ---------------------------------------------------


def test_provider_example(tmp_path: Path) -> None:
    config = load_text(tmp_path, PROVIDER_EXAMPLE, OPENAI_API_KEY=PROVIDER_KEY)
    assert config.providers == (
        ProviderConfig(
            name="openai",
            kind="openai",
            base_url="https://api.openai.com/v1",
            api_key=PROVIDER_KEY,
            supports=frozenset(
                {"chat", "embeddings", "audio", "images", "fine_tuning", "responses", "rerank"}
            ),
            api_key_env="OPENAI_API_KEY",
        ),
    )
    (model,) = config.models
    assert model == ModelConfig(
        id="gpt-4o-mini",
        provider="openai",
        upstream="gpt-4o-mini",
        input_usd_per_mtok=Decimal("0.15"),
        output_usd_per_mtok=Decimal("0.60"),
    )
    # Exact decimals, not the binary float 0.15 widened to Decimal.
    assert str(model.input_usd_per_mtok) == "0.15"
    assert model.input_usd_per_mtok != Decimal(0.15)
    assert model.output_usd_per_mtok == Decimal("0.6")


def test_all_prices_upstream_default_and_provider_settings(tmp_path: Path) -> None:
    text = """
[[providers]]
name = "local-llm_2"
kind = "ollama"
base_url = "http://127.0.0.1:11434/v1/"
api_key = "inline-key"
max_connections = 7
max_keepalive_connections = 3
connect_timeout_s = 1
read_timeout_s = 2.5
keepalive_expiry_s = 12.5
max_response_bytes = 1000

[[models]]
id = "llama"
provider = "local-llm_2"
input_usd_per_mtok = 1
output_usd_per_mtok = 2.000001
usd_per_image = 0.04
usd_per_search_unit = 0.0025
usd_per_1k_chars = 0.015
usd_per_minute = 0.006
training_usd_per_mtok = 0
usd_per_image_by = { "1024x1792" = 0.08, "1024x1024/hd" = 0.12 }
max_document_tokens = 16000
"""
    config = load_text(tmp_path, text)
    (provider,) = config.providers
    assert provider.kind == "ollama"  # OpenAI wire format, but the name is kept
    assert provider.base_url == "http://127.0.0.1:11434/v1"  # trailing slash stripped
    assert provider.api_key == "inline-key"
    assert provider.supports is None
    assert (provider.max_connections, provider.max_keepalive_connections) == (7, 3)
    assert provider.connect_timeout_s == 1.0
    assert isinstance(provider.connect_timeout_s, float)
    assert provider.read_timeout_s == 2.5
    assert provider.keepalive_expiry_s == 12.5
    assert provider.max_response_bytes == 1000
    (model,) = config.models
    assert model.upstream == "llama"
    assert model.input_usd_per_mtok == Decimal("1")
    assert str(model.output_usd_per_mtok) == "2.000001"
    assert model.usd_per_image == Decimal("0.04")
    assert model.usd_per_search_unit == Decimal("0.0025")
    assert model.usd_per_1k_chars == Decimal("0.015")
    assert model.usd_per_minute == Decimal("0.006")
    assert model.training_usd_per_mtok == Decimal("0")
    assert model.usd_per_image_by == (
        ("1024x1792", Decimal("0.08")),
        ("1024x1024/hd", Decimal("0.12")),
    )
    assert model.max_document_tokens == 16000


@pytest.mark.parametrize(
    ("line", "key", "problem"),
    [
        ("max_document_tokens = 511", "max_document_tokens", "from 512 to 16000, got 511"),
        ("max_document_tokens = 16001", "max_document_tokens", "from 512 to 16000"),
        ("max_document_tokens = 1.5e3", "max_document_tokens", "an integer from 512"),
        ("usd_per_image_by = 0.04", "usd_per_image_by", "a table of prices by name"),
        ('usd_per_image_by = { "512x512" = -1 }', "usd_per_image_by", '"512x512" must not be'),
        (
            'usd_per_image_by = { "512x512" = "one" }',
            "usd_per_image_by[0][1]",  # the first entry's price
            'must be a number of US dollars, got "one"',
        ),
    ],
)
def test_unit_settings_of_a_model_are_checked(
    tmp_path: Path, line: str, key: str, problem: str
) -> None:
    text = PROVIDER + f'\n[[models]]\nid = "m"\nprovider = "openai"\n{line}\n'
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text)
    assert caught.value.key == f"models[0].{key}"
    assert problem in caught.value.problem


def test_a_price_may_be_written_as_a_string_of_its_exact_decimal(tmp_path: Path) -> None:
    text = MODEL + "usd_per_image = '0.04'\nusd_per_image_by = { \"1024x1024\" = '0.080' }\n"
    (model,) = load_text(tmp_path, text).models
    assert model.usd_per_image == Decimal("0.04")
    assert model.usd_per_image_by == (("1024x1024", Decimal("0.080")),)


def test_translations_is_a_model_setting_defaulting_to_none(tmp_path: Path) -> None:
    text = PROVIDER + "".join(
        f'\n[[models]]\nid = "{name}"\nprovider = "openai"\nupstream = "{upstream}"\n{line}\n'
        for name, upstream, line in (
            ("faster", "Systran/faster-whisper-large-v3", "translations = true"),
            ("plain-whisper", "whisper-1", "translations = false"),
            ("default", "whisper-1", ""),
        )
    )
    models = load_text(tmp_path, text).models
    assert [m.translations for m in models] == [True, False, None]


@pytest.mark.parametrize(
    ("provider_lines", "line", "problem"),
    [
        ("", 'translations = "yes"', 'must be true or false, got "yes"'),
        ("", "translations = 1", "must be true or false, got 1"),
        ('supports = ["chat"]\n', "translations = true", 'does not list "audio"'),
        ('supports = ["chat"]\n', "translations = false", None),  # refusing is always fine
    ],
)
def test_a_bad_translations_value_fails_at_start(
    tmp_path: Path, provider_lines: str, line: str, problem: str | None
) -> None:
    text = PROVIDER + provider_lines + f'\n[[models]]\nid = "m"\nprovider = "openai"\n{line}\n'
    path = write(tmp_path, text)
    if problem is None:
        assert load_config(path, environ={}).models[0].translations is False
        return
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert_error(caught.value, str(path), "models[0].translations", problem)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "cohere", "ollama", "vllm"])
def test_every_provider_kind_is_accepted(tmp_path: Path, kind: str) -> None:
    text = f'[[providers]]\nname = "p"\nkind = "{kind}"\nbase_url = "https://x.example"\n'
    assert load_text(tmp_path, text).providers[0].kind == kind


def test_api_key_env_resolves_from_environ(tmp_path: Path) -> None:
    text = PROVIDER + 'api_key_env = "MY_KEY"\n'
    assert load_text(tmp_path, text, MY_KEY=PROVIDER_KEY).providers[0].api_key == PROVIDER_KEY


def test_api_key_env_value_must_be_a_header_value(tmp_path: Path) -> None:
    text = PROVIDER + 'api_key_env = "MY_KEY"\n'
    for bad in ("sk two", "sk-caf\u00e9", "sk\r\nX-Injected: 1"):
        with pytest.raises(ConfigError) as caught:
            load_text(tmp_path, text, MY_KEY=bad)
        assert caught.value.key == "providers[0].api_key_env"
        assert "visible ASCII" in caught.value.problem and bad not in str(caught.value)


def test_api_key_env_unset_gives_none(tmp_path: Path) -> None:
    text = PROVIDER + 'api_key_env = "MY_KEY"\n'
    assert load_text(tmp_path, text).providers[0].api_key is None
    assert load_text(tmp_path, text, MY_KEY="").providers[0].api_key is None


def test_provider_without_key_has_none(tmp_path: Path) -> None:
    assert load_text(tmp_path, PROVIDER).providers[0].api_key is None


def test_top_level_and_tables(tmp_path: Path) -> None:
    text = f"""
database_url = "postgres://u:pw@db.example:5432/gw"
redis_url = "redis://localhost:6379/0"
data_dir = "/srv/gateway"
master_key = "{MASTER_KEY_B64}"
public_base_url = "https://gw.example.com/"
log_level = "warning"

[server]
host = "0.0.0.0"
port = 0
workers = 4
graceful_timeout_s = 5
keep_alive_timeout_s = 10.5
keep_alive_max_requests = 50
max_request_body_bytes = 2048
max_audio_body_bytes = 4096
max_file_body_bytes = 8192
max_vision_body_bytes = 1024
access_log = false

[webhooks]
allowed_private_networks = ["127.0.0.0/8", "10.1.2.3/16", "::1/128"]
allow_http = true
allowed_ports = [8443, 9443]

[billing]
payment_provider = "test"
max_auto_topups_per_day = 5
"""
    config = load_text(tmp_path, text)
    assert config.database_url == "postgresql://u:pw@db.example:5432/gw"  # normalised scheme
    assert config.redis_url == "redis://localhost:6379/0"
    assert config.data_dir == Path("/srv/gateway")
    assert config.master_key == MASTER_KEY
    assert config.public_base_url == "https://gw.example.com"
    assert config.log_level == "WARNING"
    assert config.server == ServerConfig(
        host="0.0.0.0",
        port=0,
        workers=4,
        graceful_timeout_s=5.0,
        keep_alive_timeout_s=10.5,
        keep_alive_max_requests=50,
        max_request_body_bytes=2048,
        max_audio_body_bytes=4096,
        max_file_body_bytes=8192,
        max_vision_body_bytes=1024,
        access_log=False,
    )
    assert config.webhooks == WebhooksConfig(
        allowed_private_networks=(
            ipaddress.ip_network("127.0.0.0/8"),
            ipaddress.ip_network("10.1.0.0/16"),  # host bits dropped (strict=False)
            ipaddress.ip_network("::1/128"),
        ),
        allow_http=True,
        allowed_ports=(8443, 9443),
    )
    assert config.billing == BillingConfig(payment_provider="test", max_auto_topups_per_day=5)


def test_default_database_follows_data_dir(tmp_path: Path) -> None:
    assert load_text(tmp_path, 'data_dir = "state"\n').database_url == "sqlite:///state/gateway.db"
    config = load_config(environ={"GATEWAY_DATA_DIR": "/data"})
    assert config.database_url == "sqlite:////data/gateway.db"


# --- environment overrides -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "attribute", "expected"),
    [
        ("GATEWAY_DATABASE_URL", "postgresql://db/gw", "database_url", "postgresql://db/gw"),
        ("GATEWAY_DATABASE_URL", "sqlite:///tmp/x.db", "database_url", "sqlite:///tmp/x.db"),
        ("GATEWAY_REDIS_URL", "rediss://cache:6380", "redis_url", "rediss://cache:6380"),
        ("GATEWAY_DATA_DIR", "elsewhere", "data_dir", Path("elsewhere")),
        ("GATEWAY_HOST", "0.0.0.0", "server.host", "0.0.0.0"),
        ("GATEWAY_PORT", "9000", "server.port", 9000),
        ("GATEWAY_PORT", "0", "server.port", 0),
        ("GATEWAY_WORKERS", "3", "server.workers", 3),
        ("GATEWAY_MASTER_KEY", MASTER_KEY_B64, "master_key", MASTER_KEY),
        (
            "GATEWAY_PUBLIC_BASE_URL",
            "https://img.example/",
            "public_base_url",
            "https://img.example",
        ),
        (
            "GATEWAY_BOOTSTRAP_MANAGEMENT_KEY",
            BOOTSTRAP_KEY,
            "bootstrap_management_key",
            BOOTSTRAP_KEY,
        ),
        ("GATEWAY_LOG_LEVEL", "debug", "log_level", "DEBUG"),
    ],
)
def test_environment_overrides_file(
    tmp_path: Path, variable: str, value: str, attribute: str, expected: object
) -> None:
    text = f"""
database_url = "sqlite:///file.db"
redis_url = "redis://file"
data_dir = "file-dir"
master_key = "{base64.b64encode(b"f" * 32).decode()}"
public_base_url = "https://file.example"
log_level = "ERROR"
[server]
host = "10.0.0.1"
port = 1234
workers = 2
"""
    config = load_text(tmp_path, text, **{variable: value})
    target: object = config
    for part in attribute.split("."):
        target = getattr(target, part)
    assert target == expected
    # Only the named value changes.
    baseline = load_text(tmp_path, text)
    assert config.server.keep_alive_timeout_s == baseline.server.keep_alive_timeout_s
    if variable != "GATEWAY_HOST":
        assert config.server.host == "10.0.0.1"
    if variable != "GATEWAY_LOG_LEVEL":
        assert config.log_level == "ERROR"


def test_blank_environment_values_do_not_override(tmp_path: Path) -> None:
    config = load_text(tmp_path, "[server]\nport = 1234\n", GATEWAY_PORT="", GATEWAY_HOST="  ")
    assert (config.server.host, config.server.port) == ("127.0.0.1", 1234)


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("GATEWAY_PORT", "80a", 'must be an integer from 0 to 65535, got "80a"'),
        ("GATEWAY_PORT", "65536", "must be an integer from 0 to 65535, got 65536"),
        ("GATEWAY_PORT", "-1", 'must be an integer from 0 to 65535, got "-1"'),
        ("GATEWAY_WORKERS", "0", "must be an integer of at least 1, got 0"),
        ("GATEWAY_WORKERS", "two", 'must be an integer of at least 1, got "two"'),
        ("GATEWAY_DATABASE_URL", "mysql://db/x", "must be sqlite:///<path> or postgresql://"),
        ("GATEWAY_DATABASE_URL", "sqlite:///", "must be sqlite:///<path> or postgresql://"),
        ("GATEWAY_REDIS_URL", "http://cache", "must be a redis://, rediss:// or unix:// URL"),
        ("GATEWAY_PUBLIC_BASE_URL", "img.example", "must be an http:// or https:// URL"),
        ("GATEWAY_MASTER_KEY", "not base64!", "must be base64 of exactly 32 bytes"),
        ("GATEWAY_MASTER_KEY", base64.b64encode(b"k" * 31).decode(), "exactly 32 bytes"),
        ("GATEWAY_BOOTSTRAP_MANAGEMENT_KEY", "service_sk_" + "x" * 20, '"service_mgmt_" followed'),
        ("GATEWAY_BOOTSTRAP_MANAGEMENT_KEY", "service_mgmt_" + "x" * 15, "at least 16 characters"),
        ("GATEWAY_OPERATOR_KEY", "service_mgmt_" + "x" * 32, 'must start with "service_op_"'),
        ("GATEWAY_OPERATOR_KEY", "x" * 40, 'must start with "service_op_"'),
        ("GATEWAY_OPERATOR_KEY", "service_op_" + "x" * 20, "at least 32 characters"),
        ("GATEWAY_OPERATOR_KEY", OPERATOR_KEY + ",service_op_short", "at least 32 characters"),
        ("GATEWAY_OPERATOR_KEY", OPERATOR_KEY + ",", "an empty key at position 2"),
        ("GATEWAY_OPERATOR_KEY", OPERATOR_KEY + ",," + OPERATOR_KEY2, "an empty key"),
        ("GATEWAY_OPERATOR_KEY", "service_op_" + "x" * 20 + " " + "y" * 20, "letters, digits"),
        ("GATEWAY_OPERATOR_KEY", "service_op_" + "é" * 30, "letters, digits"),
        (
            "GATEWAY_LOG_LEVEL",
            "verbose",
            'must be one of DEBUG, INFO, WARNING, ERROR, got "verbose"',
        ),
    ],
)
def test_bad_environment_value(variable: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={variable: value})
    assert_error(caught.value, "environment", variable, problem)


def test_bootstrap_key_with_exactly_16_characters_is_accepted() -> None:
    key = "service_mgmt_" + "x" * 16
    assert (
        load_config(environ={"GATEWAY_BOOTSTRAP_MANAGEMENT_KEY": key}).bootstrap_management_key
        == key
    )


def test_operator_keys_one_or_several() -> None:
    assert load_config(environ={}).operator_keys == ()
    assert load_config(environ={"GATEWAY_OPERATOR_KEY": " "}).operator_keys == ()
    one = load_config(environ={"GATEWAY_OPERATOR_KEY": OPERATOR_KEY})
    assert one.operator_keys == (OPERATOR_KEY,)
    several = load_config(environ={"GATEWAY_OPERATOR_KEY": f"{OPERATOR_KEY} , {OPERATOR_KEY2}"})
    assert several.operator_keys == (OPERATOR_KEY, OPERATOR_KEY2)
    for text_form in (repr(several), str(several)):
        assert "service_op_" not in text_form and "operator_keys='***'" in text_form


def test_secrets_are_not_echoed_in_environment_errors() -> None:
    bad_master = "c2VjcmV0LW1hc3Rlci1rZXk="  # base64, but of 17 bytes
    bad_bootstrap = "service_mgmt_short!"
    for variable, value in [
        ("GATEWAY_MASTER_KEY", bad_master),
        ("GATEWAY_BOOTSTRAP_MANAGEMENT_KEY", bad_bootstrap),
        ("GATEWAY_OPERATOR_KEY", "service_op_tooshort-secret"),
        ("GATEWAY_OPERATOR_KEY", OPERATOR_KEY + ",service_mgmt_" + "s" * 40),
        ("GATEWAY_DATABASE_URL", "mysql://user:hunter2@db/x"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_config(environ={variable: value})
        assert value not in str(caught.value)
        assert "hunter2" not in str(caught.value)


# --- file errors: each names the file, the dotted key and the problem -----------------------


P = PROVIDER
MODEL = PROVIDER + "[[models]]\nid = 'm'\nprovider = 'openai'\n"
NAMELESS = "[[providers]]\nkind = 'openai'\nbase_url = 'https://x'\n"
KINDLESS = "[[providers]]\nname = 'p'\nbase_url = 'https://x'\n"
URLLESS = "[[providers]]\nname = 'p'\nkind = 'openai'\n"
NETS = "[webhooks]\nallowed_private_networks = "
KINDS = "anthropic, cohere, ollama, openai, vllm"
HTTP = "must be an http:// or https:// URL"
DB = "must be sqlite:///<path> or postgresql://"
LEVELS = "must be one of DEBUG, INFO, WARNING, ERROR"
CIDR = 'must be a CIDR network such as "127.0.0.0/8"'
PORT = "must be an integer from 0 to 65535"
AT_LEAST_1 = "must be an integer of at least 1"
DOLLARS = "must be a number of US dollars"

FILE_ERRORS = [
    # unknown keys anywhere
    ("databse_url = 'x'\n", "databse_url", 'unknown key (did you mean "database_url"?)'),
    ("[server]\nprot = 1\n", "server.prot", "unknown key"),
    ("[servr]\nport = 1\n", "servr", "unknown key"),
    (P + "apikey = 'x'\n", "providers[0].apikey", "unknown key"),
    (MODEL + "price = 1\n", "models[0].price", "unknown key"),
    ("[webhooks]\nallow_https = true\n", "webhooks.allow_https", "unknown key"),
    ("[billing]\nprovider = 'test'\n", "billing.provider", "unknown key"),
    ("bootstrap_management_key = 'x'\n", "bootstrap_management_key", "unknown key"),
    # wrong types and ranges in [server]
    ('[server]\nport = "80a"\n', "server.port", f'{PORT}, got "80a"'),
    ("[server]\nport = 70000\n", "server.port", f"{PORT}, got 70000"),
    ("[server]\nport = 80.0\n", "server.port", f"{PORT}, got 80.0"),
    ("[server]\nworkers = 0\n", "server.workers", f"{AT_LEAST_1}, got 0"),
    ("[server]\nworkers = true\n", "server.workers", f"{AT_LEAST_1}, got true"),
    ("[server]\nhost = 1\n", "server.host", "must be a string, got 1"),
    ("[server]\nhost = ''\n", "server.host", "must not be empty"),
    ("[server]\ngraceful_timeout_s = 0\n", "server.graceful_timeout_s", "than 0, got 0"),
    ("[server]\nkeep_alive_timeout_s = -1.5\n", "server.keep_alive_timeout_s", "than 0"),
    ("[server]\nkeep_alive_timeout_s = inf\n", "server.keep_alive_timeout_s", "finite"),
    ("[server]\nkeep_alive_max_requests = 0\n", "server.keep_alive_max_requests", AT_LEAST_1),
    ("[server]\nmax_request_body_bytes = '1MB'\n", "server.max_request_body_bytes", AT_LEAST_1),
    ("[server]\nmax_audio_body_bytes = 0\n", "server.max_audio_body_bytes", AT_LEAST_1),
    ("[server]\nmax_file_body_bytes = -1\n", "server.max_file_body_bytes", AT_LEAST_1),
    ("[server]\nmax_vision_body_bytes = 2.5\n", "server.max_vision_body_bytes", AT_LEAST_1),
    ("[server]\naccess_log = 'yes'\n", "server.access_log", 'must be true or false, got "yes"'),
    ("server = 1\n", "server", "must be a table ([server]), got 1"),
    # top level
    ("database_url = 'mysql://db/x'\n", "database_url", DB),
    ("redis_url = 'memcached://x'\n", "redis_url", "must be a redis://, rediss:// or unix:// URL"),
    ("data_dir = ''\n", "data_dir", "must not be empty"),
    ("master_key = 'c2hvcnQ='\n", "master_key", "must be base64 of exactly 32 bytes"),
    ("public_base_url = 'ftp://x'\n", "public_base_url", HTTP),
    ("log_level = 'TRACE'\n", "log_level", f'{LEVELS}, got "TRACE"'),
    # providers
    ("[providers]\nname = 'x'\n", "providers", "must be an array of tables ([[providers]])"),
    ("providers = [1]\n", "providers[0]", "must be a table, got 1"),
    (NAMELESS, "providers[0].name", "is required"),
    (KINDLESS, "providers[0].kind", "is required"),
    (URLLESS, "providers[0].base_url", "is required"),
    (NAMELESS + "name = 'Open AI'\n", "providers[0].name", "lowercase letters, digits"),
    (NAMELESS + "name = '-x'\n", "providers[0].name", "starting with a letter or digit"),
    (P + P, "providers[1].name", 'duplicate provider name "openai" (also providers[0].name)'),
    (KINDLESS + "kind = 'gemini'\n", "providers[0].kind", f'one of {KINDS}, got "gemini"'),
    (URLLESS + "base_url = 'ftp://x'\n", "providers[0].base_url", f'{HTTP}, got "ftp://x"'),
    (URLLESS + "base_url = 'https://'\n", "providers[0].base_url", HTTP),
    (URLLESS + "base_url = 'https://x:port'\n", "providers[0].base_url", HTTP),
    (P + "supports = ['chat', 'vision']\n", "providers[0].supports[1]", 'got "vision"'),
    (P + "supports = 'chat'\n", "providers[0].supports", 'must be an array, got "chat"'),
    (P + "supports = []\n", "providers[0].supports", "must list at least one of"),
    (P + "api_key = 'k'\napi_key_env = 'K'\n", "providers[0].api_key_env", "not both"),
    (P + "api_key = 5\n", "providers[0].api_key", "must be a string, got an integer"),
    (P + "api_key = 'sk two'\n", "providers[0].api_key", "visible ASCII"),
    (P + "api_key = 'sk-caf\u00e9'\n", "providers[0].api_key", "visible ASCII"),
    (P + "api_key_env = 'sk-abc'\n", "providers[0].api_key_env", "name of an environment variable"),
    (P + "max_connections = 0\n", "providers[0].max_connections", f"{AT_LEAST_1}, got 0"),
    (P + "max_keepalive_connections = -2\n", "providers[0].max_keepalive_connections", "least 1"),
    (P + "connect_timeout_s = 0\n", "providers[0].connect_timeout_s", "greater than 0"),
    (P + "read_timeout_s = '10s'\n", "providers[0].read_timeout_s", 'than 0, got "10s"'),
    (P + "keepalive_expiry_s = 0\n", "providers[0].keepalive_expiry_s", "greater than 0"),
    (P + "max_response_bytes = 0\n", "providers[0].max_response_bytes", f"{AT_LEAST_1}, got 0"),
    # models
    (P + "[[models]]\nprovider = 'openai'\n", "models[0].id", "is required"),
    (P + "[[models]]\nid = ''\nprovider = 'openai'\n", "models[0].id", "must not be empty"),
    (P + "[[models]]\nid = 'm'\n", "models[0].provider", "is required"),
    (MODEL + MODEL.removeprefix(P), "models[1].id", 'duplicate model id "m" (also models[0].id)'),
    (P + "[[models]]\nid = 'm'\nprovider = 'azure'\n", "models[0].provider", 'named "azure"'),
    (P + "[[models]]\nid = 'm'\nprovider = 'azure'\n", "models[0].provider", "providers: openai)"),
    (MODEL.removeprefix(P), "models[0].provider", "(configured providers: none)"),
    (MODEL + "upstream = 3\n", "models[0].upstream", "must be a string, got 3"),
    (MODEL + "input_usd_per_mtok = -0.1\n", "models[0].input_usd_per_mtok", "negative, got -0.1"),
    (MODEL + "usd_per_image = 'cheap'\n", "models[0].usd_per_image", f'{DOLLARS}, got "cheap"'),
    (MODEL + "usd_per_image = true\n", "models[0].usd_per_image", f"{DOLLARS}, got true"),
    (MODEL + "usd_per_minute = nan\n", "models[0].usd_per_minute", f"{DOLLARS}, got nan"),
    # webhooks and billing
    (NETS + "['127.0.0.0/8', '10.0.0.0/33']\n", "webhooks.allowed_private_networks[1]", CIDR),
    (NETS + "[10]\n", "webhooks.allowed_private_networks[0]", f"{CIDR}, got 10"),
    (NETS + "'127.0.0.0/8'\n", "webhooks.allowed_private_networks", "must be an array"),
    ("[webhooks]\nallow_http = 1\n", "webhooks.allow_http", "must be true or false, got 1"),
    ("[webhooks]\nallowed_ports = [0]\n", "webhooks.allowed_ports[0]", "from 1 to 65535, got 0"),
    ("[webhooks]\nallowed_ports = 443\n", "webhooks.allowed_ports", "must be an array"),
    (
        "[billing]\npayment_provider = 'x'\n",
        "billing.payment_provider",
        'one of stripe, test, got "x"',
    ),
    (
        "[billing]\nmax_auto_topups_per_day = -1\n",
        "billing.max_auto_topups_per_day",
        "an integer from 0 to 100, got -1",
    ),
]


@pytest.mark.parametrize(("text", "key", "problem"), FILE_ERRORS)
def test_bad_file_value(tmp_path: Path, text: str, key: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert_error(caught.value, str(path), key, problem)
    assert str(caught.value) == f"{path}: {key}: {caught.value.problem}"


def test_secrets_are_not_echoed_in_file_errors(tmp_path: Path) -> None:
    for text in [
        PROVIDER + f"api_key_env = '{PROVIDER_KEY}'\n",
        PROVIDER + f"api_key = '{PROVIDER_KEY}'\napi_key_env = 'K'\n",
        "master_key = 'dG9vLXNob3J0LXNlY3JldA=='\n",
        "database_url = 'mysql://root:hunter2@db/x'\n",
    ]:
        with pytest.raises(ConfigError) as caught:
            load_text(tmp_path, text)
        message = str(caught.value)
        for secret in (PROVIDER_KEY, "dG9vLXNob3J0LXNlY3JldA==", "hunter2"):
            assert secret not in message


def test_config_error_format_and_pickling() -> None:
    error = ConfigError("gateway.toml", "server.port", "must be an integer")
    assert str(error) == "gateway.toml: server.port: must be an integer"
    assert (error.file, error.key, error.problem) == (
        "gateway.toml",
        "server.port",
        "must be an integer",
    )
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error)
    assert str(ConfigError("x.toml", "", "file not found")) == "x.toml: file not found"


# --- repr and redaction ----------------------------------------------------------------------


def test_repr_does_not_leak_secrets(tmp_path: Path) -> None:
    text = (
        "database_url = 'postgresql://gw:dbpass99@db/gw'\nredis_url = 'redis://:redispass7@r'\n"
        + PROVIDER
    )
    text += f"api_key = '{PROVIDER_KEY}'\n"
    config = load_text(
        tmp_path,
        text,
        GATEWAY_MASTER_KEY=MASTER_KEY_B64,
        GATEWAY_BOOTSTRAP_MANAGEMENT_KEY=BOOTSTRAP_KEY,
    )
    assert config.providers[0].api_key == PROVIDER_KEY
    assert config.master_key == MASTER_KEY
    assert config.bootstrap_management_key == BOOTSTRAP_KEY
    for text_form in (repr(config), str(config), repr(config.providers[0])):
        for secret in (
            PROVIDER_KEY,
            MASTER_KEY_B64,
            repr(MASTER_KEY),
            BOOTSTRAP_KEY,
            "dbpass99",
            "redispass7",
        ):
            assert secret not in text_form
    assert "api_key='***'" in repr(config.providers[0])
    assert "master_key='***'" in repr(config)
    assert "bootstrap_management_key='***'" in repr(config)
    assert "postgresql://gw:***@db/gw" in repr(config)
    assert "name='openai'" in repr(config)  # the rest is still shown


def test_repr_shows_none_for_absent_secrets() -> None:
    config = load_config(environ={})
    assert "master_key=None" in repr(config)
    assert "api_key=None" in repr(
        ProviderConfig(name="p", kind="openai", base_url="https://x", api_key=None, supports=None)
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://user:secret@db:5432/gw", "postgresql://user:***@db:5432/gw"),
        ("postgresql://user@db/gw", "postgresql://user@db/gw"),
        ("redis://:secret@cache:6379/0", "redis://:***@cache:6379/0"),
        ("postgresql://u:p@ss@db/gw", "postgresql://u:***@db/gw"),
        (
            "postgresql://db/gw?user=u&password=secret&sslmode=require",
            "postgresql://db/gw?user=u&password=***&sslmode=require",
        ),
        ("sqlite:///var/gateway.db", "sqlite:///var/gateway.db"),
        ("sqlite:///odd:name@here.db", "sqlite:///odd:name@here.db"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_images_default_model(tmp_path: Path) -> None:
    text = PROVIDER + '[[models]]\nid = "pix"\nprovider = "openai"\nupstream = "dall-e-2"\n'
    assert load_text(tmp_path, text).images.default_model is None
    chosen = load_text(tmp_path, text + '[images]\ndefault_model = "pix"\n').images
    assert chosen.default_model == "pix"
    direct = load_text(tmp_path, text + '[images]\ndefault_model = "openai/gpt-image-1"\n')
    assert direct.images.default_model == "openai/gpt-image-1"
    for value, problem in (
        ('"nope"', 'no [[models]] entry has the id "nope"'),
        ('"azure/dall-e-2"', 'no [[models]] entry has the id "azure/dall-e-2"'),
        ("3", "must be a string, got 3"),
    ):
        path = write(tmp_path, text + f"[images]\ndefault_model = {value}\n")
        with pytest.raises(ConfigError) as caught:
            load_config(path, environ={})
        assert_error(caught.value, str(path), "images.default_model", problem)


def test_images_url_lifetime(tmp_path: Path) -> None:
    assert load_text(tmp_path, "").images.url_lifetime_s == 3600  # the API's hour
    assert load_text(tmp_path, "[images]\nurl_lifetime_s = 60\n").images.url_lifetime_s == 60
    for bad in ("0", "604801", '"1h"', "1.5"):
        with pytest.raises(ConfigError, match="url_lifetime_s"):
            load_text(tmp_path, f"[images]\nurl_lifetime_s = {bad}\n")
    with pytest.raises(ConfigError, match="lifetime"):
        load_text(tmp_path, "[images]\nlifetime = 1\n")


def test_database_statement_timeout_defaults_and_validates(tmp_path: Path) -> None:
    assert load_text(tmp_path, "").database.statement_timeout_s == 10.0
    config = load_text(tmp_path, "[database]\nstatement_timeout_s = 0.5\n")
    assert config.database.statement_timeout_s == 0.5
    for bad in ("0", "-1", '"5"', "true", "inf"):
        path = write(tmp_path, f"[database]\nstatement_timeout_s = {bad}\n")
        with pytest.raises(ConfigError) as caught:
            load_config(path, environ={})
        assert_error(caught.value, str(path), "database.statement_timeout_s", "must be a number")
    path = write(tmp_path, "[database]\ntimeout = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.key == "database.timeout"


def test_each_default_is_the_configs_own() -> None:
    """The request layer's body limits and the audio route's file limit are not restated:
    they are `[server]`'s defaults."""
    from gateway.web.app import BodyLimits
    from protocol.audio.transcription import MAX_FILE_BYTES

    server = ServerConfig()
    limits = BodyLimits()
    assert (limits.json, limits.audio, limits.file, limits.vision) == (
        server.max_request_body_bytes,
        server.max_audio_body_bytes,
        server.max_file_body_bytes,
        server.max_vision_body_bytes,
    )
    assert server.max_audio_body_bytes == MAX_FILE_BYTES
