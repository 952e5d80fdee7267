-- The measurements' status CHECK as equalities joined by OR, not an IN list (issue 28, the
-- farm service's CPU per row): SQLite evaluates a constant IN list of more than two values
-- through an ephemeral b-tree that it builds, fills and frees for every row inserted, about
-- 5 % of the service's CPU per job (docs/bench/farm-service.md, round 7). The allowed values,
-- and so the schema's meaning, are unchanged. The table is rebuilt (SQLite cannot change a
-- CHECK in place) as in 0007: rows, ids and the index as they were, the views untouched.
CREATE TABLE measurements_new (
  id              INTEGER PRIMARY KEY,
  variant_id      INTEGER NOT NULL REFERENCES variants(id),
  gpu_type        TEXT NOT NULL REFERENCES gpu_types(name),
  worker_id       INTEGER NOT NULL REFERENCES workers(id),
  status          TEXT NOT NULL CHECK (status = 'ok' OR status = 'compile_error' OR
                    status = 'launch_error' OR status = 'runtime_fault' OR
                    status = 'wrong_result' OR status = 'timeout' OR status = 'worker_lost' OR
                    status = 'unsupported' OR status = 'implausible'),
  error           TEXT NOT NULL,
  samples_json    TEXT NOT NULL,     -- at most 256 samples, evenly spread over the run
  n_samples       INTEGER NOT NULL,  -- samples taken (the summary is of all of them)
  median_us       REAL NOT NULL,
  min_us          REAL NOT NULL,
  spread          REAL NOT NULL,     -- (p90 - p10) / median
  max_rel_error   REAL NOT NULL,
  registers       INTEGER NOT NULL,
  spill_bytes     INTEGER NOT NULL,
  smem_bytes      INTEGER NOT NULL,
  compile_seconds REAL NOT NULL,
  estimate_us     REAL NOT NULL,
  source_hash     TEXT NOT NULL,
  nvrtc_version   TEXT NOT NULL,
  nvrtc_major     TEXT NOT NULL,
  driver_version  TEXT NOT NULL,
  emulated        INTEGER NOT NULL CHECK (emulated IN (0, 1)),  -- two values: compared, no b-tree
  attempts        INTEGER NOT NULL,
  finished_ms     INTEGER NOT NULL,
  recorded_ms     INTEGER NOT NULL,
  import_id       INTEGER REFERENCES imports(id),
  p10_us          REAL NOT NULL,
  p90_us          REAL NOT NULL,
  mean_us         REAL NOT NULL,
  mad_us          REAL NOT NULL,
  health_sm_clock_mhz        INTEGER CHECK (health_sm_clock_mhz >= 0),
  health_max_sm_clock_mhz    INTEGER CHECK (health_max_sm_clock_mhz >= 0),
  health_temperature_c       INTEGER CHECK (health_temperature_c >= 0),
  health_clock_event_reasons INTEGER,
  health_ecc_uncorrected     INTEGER CHECK (health_ecc_uncorrected >= 0),
  health_note                TEXT,
  UNIQUE (variant_id, gpu_type, worker_id, finished_ms)
) STRICT;

INSERT INTO measurements_new(id, variant_id, gpu_type, worker_id, status, error, samples_json,
  n_samples, median_us, min_us, spread, max_rel_error, registers, spill_bytes, smem_bytes,
  compile_seconds, estimate_us, source_hash, nvrtc_version, nvrtc_major, driver_version,
  emulated, attempts, finished_ms, recorded_ms, import_id, p10_us, p90_us, mean_us, mad_us,
  health_sm_clock_mhz, health_max_sm_clock_mhz, health_temperature_c, health_clock_event_reasons,
  health_ecc_uncorrected, health_note)
SELECT id, variant_id, gpu_type, worker_id, status, error, samples_json,
  n_samples, median_us, min_us, spread, max_rel_error, registers, spill_bytes, smem_bytes,
  compile_seconds, estimate_us, source_hash, nvrtc_version, nvrtc_major, driver_version,
  emulated, attempts, finished_ms, recorded_ms, import_id, p10_us, p90_us, mean_us, mad_us,
  health_sm_clock_mhz, health_max_sm_clock_mhz, health_temperature_c, health_clock_event_reasons,
  health_ecc_uncorrected, health_note
FROM measurements;

-- As in 0007: the old table dropped first, the new one renamed with the legacy rename, which
-- leaves the views that read measurements by name (ok_measurements, estimator_error) alone.
PRAGMA legacy_alter_table = ON;
DROP TABLE measurements;
ALTER TABLE measurements_new RENAME TO measurements;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX measurements_lookup ON measurements(variant_id, gpu_type, emulated, status);
