"""Plugins on the request path (docs/plugins.md):

interface.py     what a plugin is: its hooks, `Exchange`, `Blocked`, `Stored`
pipeline.py      the instance's plugins in order, and one request's run through them
stream_guard.py  a streamed answer behind the output checks
"""
