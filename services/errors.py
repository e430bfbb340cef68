"""The services (domain) layer's exceptions: none of its own, on purpose. A domain rule that
refuses a request raises the client's answer directly, an `APIError` (protocol/errors.py: 401
from services/auth.py, 403 from services/principal.py, 503 `master_key_rotated` from
services/keyring.py); everything else it raises is a lower layer's, with that layer's meaning:

    protocol/errors.py   APIError, BlobCorrupt, SecretBoxError, PaymentDeclined,
                         PaymentRequiresAction, PaymentUnavailable, UnknownPaymentMethod (the
                         payment processors: services/payments.py, services/stripe/)
    storage/errors.py    StorageError and below (BlobNotFound, StorageUnavailable, ...)

A new domain exception goes here, drawn in this tree, and is mapped at the gateway's boundary
(gateway/web/errors.py `to_api_error`), not by hand in handlers.

    Exception
     └── (none yet)
"""
