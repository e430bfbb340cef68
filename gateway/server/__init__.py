"""The internet-facing HTTP front: the built-in HTTP/1.1 (+ WebSocket) server, and serving
(signals, graceful stop, workers, the Hypercorn option). It speaks ASGI to the app
(gateway/web/) and knows no routes."""
