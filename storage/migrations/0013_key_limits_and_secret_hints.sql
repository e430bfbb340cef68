-- Issue #19: webhook secret hints that gave a short secret away, and (below) the key whose
-- budgets a fine-tuning job's training counts against.
--
-- `secret_hint` used to show the last 4 characters of any secret, so a secret of 4 characters
-- or fewer was shown whole and a short one largely. A hint now shows characters only when
-- what follows the secret's `whsec_` prefix has at least 32 of them (protocol/webhooks.py).
-- Stored hints are brought in line without opening the secrets: a sealed secret is
-- `v1:` + base64(12-byte nonce ‖ ciphertext ‖ 16-byte tag), and AES-GCM's ciphertext is as
-- long as the plaintext (printable ASCII: one byte a character), so the secret's length is
-- 3/4 of the base64 text, less its `=` padding, less 28.
UPDATE webhooks
SET secret_hint = CASE WHEN substr(secret_hint, 1, 6) = 'whsec_' THEN 'whsec_…' ELSE '…' END
WHERE substr(secret_sealed, 1, 3) = 'v1:'
  AND (length(secret_sealed) - 3) * 3 / 4
      - (length(secret_sealed) - length(rtrim(secret_sealed, '=')))
      - 28
      - CASE WHEN substr(secret_hint, 1, 6) = 'whsec_' THEN 6 ELSE 0 END
      < 32;

-- The key that created a fine-tuning job (a management or secret key's id; NULL for jobs
-- created before): its training hold counts in the key's spend for the UTC day and month the
-- job was created, and a refund at the job's end takes back what was not charged.
ALTER TABLE fine_tuning_jobs ADD COLUMN key_id TEXT;
