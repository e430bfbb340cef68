"""The stateful Responses API (routes.py): create by translating to chat completions
(create.py), the stored conversation (store.py, context.py), reads (read.py)."""
