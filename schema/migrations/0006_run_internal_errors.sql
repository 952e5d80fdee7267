-- Never silent (issue 25): a tuning run records how many of its jobs ended in internal_error
-- (a bug in dc, not the variant's fault; such results are never measurements) and how many
-- workloads they touched. A run with any is not 'ok'. Runs before this migration: 0.
ALTER TABLE tuning_runs ADD COLUMN internal_error_jobs INTEGER NOT NULL DEFAULT 0
  CHECK (internal_error_jobs >= 0);
ALTER TABLE tuning_runs ADD COLUMN internal_error_workloads INTEGER NOT NULL DEFAULT 0
  CHECK (internal_error_workloads >= 0);
