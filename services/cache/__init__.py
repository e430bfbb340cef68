"""The response cache's pure core: what an answer is filed under and when a request may have one
(keys.py, on canonical.py's encoding), and matching a question to a stored one by meaning
(semantic.py: vectors and similarity; guard.py: what makes two similar questions different).
No I/O: the store and the request path use these. docs/cache.md describes the whole cache."""
