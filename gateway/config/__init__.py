"""The gateway's configuration: one TOML file plus `GATEWAY_*` environment variables.

loader.py      where values come from (the file, `GATEWAY_*` variables) and in which order
sections.py    one parser per table ([server], [[providers]], [actors.<kind>], ...)
table.py       one TOML table being read, and `ConfigError` (file, key, problem)
schema.py      the frozen dataclasses and their defaults
values.py      what a valid value is: one parser per kind of value
master_key.py  the master key (from the environment or the data dir)
"""

from gateway.config.loader import load_config
from gateway.config.schema import (
    BillingConfig,
    Config,
    FilesConfig,
    ImagesConfig,
    ModelConfig,
    ProviderConfig,
    ServerConfig,
    WebhooksConfig,
    redact_url,
)
from gateway.config.table import ConfigError

__all__ = [
    "BillingConfig",
    "Config",
    "ConfigError",
    "FilesConfig",
    "ImagesConfig",
    "ModelConfig",
    "ProviderConfig",
    "ServerConfig",
    "WebhooksConfig",
    "load_config",
    "redact_url",
]
