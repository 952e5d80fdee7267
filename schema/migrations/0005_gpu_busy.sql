-- The GPU busy fraction of a tuning run (issue 13): per run, GPU type and device (worker),
-- the seconds the device spent on this run's jobs (their run phases: check + timing, as the
-- worker reports them) and the wall time of the run's measure stage. The tune summary's
-- "GPU busy" line is run_gpu_busy_fraction.busy_fraction for the run and GPU type: the
-- devices' busy seconds over (measure seconds x devices). Runs before this migration have
-- no rows.
CREATE TABLE run_gpu_busy (
  run_id          INTEGER NOT NULL REFERENCES tuning_runs(id),
  gpu_type        TEXT NOT NULL REFERENCES gpu_types(name),
  worker_id       INTEGER NOT NULL REFERENCES workers(id),
  busy_seconds    REAL NOT NULL CHECK (busy_seconds >= 0),
  measure_seconds REAL NOT NULL CHECK (measure_seconds > 0),
  UNIQUE (run_id, gpu_type, worker_id)
) STRICT;

CREATE VIEW run_gpu_busy_fraction AS
SELECT run_id, gpu_type, count(*) AS devices, max(measure_seconds) AS measure_seconds,
       sum(busy_seconds) AS busy_seconds,
       sum(busy_seconds) / (max(measure_seconds) * count(*)) AS busy_fraction
FROM run_gpu_busy
GROUP BY run_id, gpu_type;
