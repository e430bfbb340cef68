"""The domain: what the gateway knows how to do, without HTTP.

Files (the store joining rows, blobs and encryption), provider keys (bring-your-own-key),
generated images, stored responses, payments, who is calling (auth, principal) and the
master key's watch. Imports protocol/ and storage/ only; actors/ and gateway/ use it.
"""
