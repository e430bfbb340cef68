"""Who is calling: bearer credential -> Principal, from an in-memory cache of hashed
credentials (authenticator.py), and what a Principal may do (principal.py)."""

from gateway.auth.authenticator import Authenticator
from gateway.auth.principal import Principal

__all__ = ["Authenticator", "Principal"]
