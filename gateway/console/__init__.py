"""The operator console at /console: server-rendered pages over the same storage and actors as
the JSON API (docs/console.md)."""
