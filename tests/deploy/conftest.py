"""The SeaweedFS fixture for the compose stack test (tests/seaweedfs.py)."""

from tests.seaweedfs import seaweedfs

__all__ = ["seaweedfs"]
