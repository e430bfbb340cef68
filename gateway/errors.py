"""The gateway layer's exceptions. Every exception a request can end with, from any layer, is
mapped to the client's answer once, at the boundary: gateway/web/errors.py `to_api_error`
(where the mapping is tabled); handlers let them propagate.

    Exception
     ├── ClientDisconnected        the client left: it closed or reset the connection before
     │                             its answer was complete. The server raises it from `send`
     │                             (a write failed), the request layer from reading the body;
     │                             the boundary answers nothing and the request is logged 499
     │                             `client_disconnected`
     ├── HandshakeError            an upgrade request is not a valid WebSocket handshake: the
     │                             server answers 400 (gateway/server/websocket.py)
     ├── MasterKeyError            (gateway/config/master_key.py) the master key cannot be
     │    │                        loaded or used; the CLI prints it and exits
     │    ├── WrongMasterKey       the key given is not the one the database's secrets are
     │    │                        sealed under (gateway/keyring/unlock.py)
     │    └── RotationError        a master-key rotation cannot start or finish; the message
     │                             says what to do (gateway/keyring/rotate.py)
     ├── ConfigError               (gateway/config/table.py) the configuration is invalid
     └── InvalidValue              (gateway/config/values.py) one configuration value is
                                   invalid; `ConfigError` names where

`MasterKeyError`, `ConfigError` and `InvalidValue` stay with the configuration they describe
(gateway/config/), which never answers a request. The lower layers' own modules:
protocol/errors.py (`APIError`, the `UpstreamError` family, the parsers' errors),
storage/errors.py, services/errors.py, actors/errors.py.
"""

from __future__ import annotations

from gateway.config.master_key import MasterKeyError


class ClientDisconnected(Exception):
    """The client left: it closed or reset the connection before its answer was complete."""


class HandshakeError(Exception):
    """The upgrade request is not a valid WebSocket handshake (answer 400)."""


class WrongMasterKey(MasterKeyError):
    """The master key given is not the one the database's secrets are sealed under."""


class RotationError(MasterKeyError):
    """The rotation cannot start or finish (its message says what to do)."""
