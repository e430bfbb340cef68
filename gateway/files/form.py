"""The multipart form of an upload, around its file."""

from __future__ import annotations

from gateway.web.multipart import MultipartLimits

# What one upload's form may hold (gateway/web/multipart.py): the file and `purpose`, and a few
# more fields that SDKs may add (skipped).
FORM_LIMITS = MultipartLimits(max_parts=16)
# The most a form adds to its file: every other part's headers and value, and boundaries. The
# route's body limit is the file limit plus this, so a file of exactly the limit fits; a
# declared length past the quota by more than this is refused before the body is read.
FORM_OVERHEAD_BYTES = FORM_LIMITS.max_parts * (
    FORM_LIMITS.max_header_bytes + FORM_LIMITS.max_field_bytes + 256
)
