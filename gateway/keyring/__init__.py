"""The keyring at start: the master key checked against the database, the credential pepper.

unlock.py  `unlock`: the pepper, the key's id and creation time, or WrongMasterKey (a clear
           message, not a failed decryption later); the master key's age gauge
rotate.py  `rotate_master_key`: every sealed value and the keyring under a new master key

A running instance noticing its master key was rotated away (retired) and refusing every use of
it (`WatchedBox`, 503 `master_key_rotated`) until restarted is the domain's, services/keyring.py,
checked every interval by the actor `KeyringPoller` (actors/keyring_watch.py).
"""

from gateway.keyring.unlock import Keyring, register_age_gauge, unlock

__all__ = ["Keyring", "register_age_gauge", "unlock"]
