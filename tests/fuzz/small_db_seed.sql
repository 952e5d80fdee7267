-- Cuts a tuned tuning DB down to a few rows of each table, with 512-byte pages, for a small
-- fuzz_db_import seed (scripts/fuzz.sh: sqlite3 COPY.db < this). Foreign keys stay whole:
-- rows are removed children first, and the DB stays a valid import (docs/bench/fuzz.md).
PRAGMA foreign_keys = ON;
DELETE FROM measurements WHERE id NOT IN (SELECT id FROM measurements ORDER BY id LIMIT 3);
DELETE FROM variants WHERE id NOT IN (SELECT variant_id FROM measurements)
  AND id NOT IN (SELECT id FROM variants ORDER BY id LIMIT 2);
DELETE FROM model_workloads WHERE workload NOT IN (SELECT workload FROM variants);
DELETE FROM workloads WHERE signature NOT IN (SELECT workload FROM variants)
  AND signature NOT IN (SELECT workload FROM model_workloads);
PRAGMA journal_mode = DELETE;
PRAGMA page_size = 512;
VACUUM;
PRAGMA journal_mode = WAL;
