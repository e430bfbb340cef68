"""Images: generations, edits, variations (routes.py), and the generated images kept for
their `url` answers (store.py). Request checks per model family are protocol/images/."""

from __future__ import annotations

from gateway.images.produce import ImagesDeps
from services.images import ImageStore

__all__ = ["ImageStore", "ImagesDeps"]
