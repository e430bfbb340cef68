-- Issue #20: which instance an upload in progress belongs to (storage/instance_slot.py), so an
-- instance that restarts after a crash removes its own unfinished uploads at once instead of
-- waiting for the janitor's staleness rule. NULL for rows made before this migration.
ALTER TABLE files ADD COLUMN owner TEXT;
