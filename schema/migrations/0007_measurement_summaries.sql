-- Summaries, not every sample (issue 25): microsecond kernels take ~50,000 samples, ~400 KB
-- of JSON per row. A measurement now stores the summary of all its samples (n_samples,
-- min_us, p10_us, median_us, p90_us, mean_us, mad_us: the median absolute deviation) and at
-- most 256 of the samples, evenly spread over the run (sample i * n / 256, in order;
-- farm/measurement.h's thin_samples). The status 'implausible' is new: a time more than 20%
-- below the variant's floor (coordinator/plausibility.h), never selected, never final.
-- The table is rebuilt (SQLite cannot change a CHECK in place); existing rows are converted
-- here with the same definitions as summarize_samples: p10 and p90 are the samples of sorted
-- rank (n-1)/10 and (n-1)*9/10 (integer division), the median the middle one (the mean of
-- the two middle ones for even n).
CREATE TABLE measurements_new (
  id              INTEGER PRIMARY KEY,
  variant_id      INTEGER NOT NULL REFERENCES variants(id),
  gpu_type        TEXT NOT NULL REFERENCES gpu_types(name),
  worker_id       INTEGER NOT NULL REFERENCES workers(id),
  status          TEXT NOT NULL CHECK (status IN ('ok', 'compile_error', 'launch_error',
                    'runtime_fault', 'wrong_result', 'timeout', 'worker_lost', 'unsupported',
                    'implausible')),
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
  emulated        INTEGER NOT NULL CHECK (emulated IN (0, 1)),
  attempts        INTEGER NOT NULL,
  finished_ms     INTEGER NOT NULL,
  recorded_ms     INTEGER NOT NULL,
  import_id       INTEGER REFERENCES imports(id),
  p10_us          REAL NOT NULL,
  p90_us          REAL NOT NULL,
  mean_us         REAL NOT NULL,
  mad_us          REAL NOT NULL,
  UNIQUE (variant_id, gpu_type, worker_id, finished_ms)
) STRICT;

-- Every sample of every row with its position k and its sorted rank r.
CREATE TEMP TABLE dc_samples AS
SELECT m.id AS id, CAST(j.key AS INTEGER) AS k, CAST(j.value AS REAL) AS x,
       ROW_NUMBER() OVER (PARTITION BY m.id ORDER BY CAST(j.value AS REAL)) - 1 AS r,
       COUNT(*) OVER (PARTITION BY m.id) AS n
FROM measurements m, json_each(m.samples_json) j;

CREATE TEMP TABLE dc_stats AS
SELECT id, max(n) AS n, avg(x) AS mean_us,
       max(CASE WHEN r = (n - 1) / 10 THEN x END) AS p10_us,
       max(CASE WHEN r = (n - 1) * 9 / 10 THEN x END) AS p90_us,
       CASE WHEN max(n) % 2 = 1 THEN max(CASE WHEN r = n / 2 THEN x END)
            ELSE 0.5 * (max(CASE WHEN r = n / 2 - 1 THEN x END) + max(CASE WHEN r = n / 2 THEN x END))
       END AS median
FROM dc_samples GROUP BY id;

CREATE TEMP TABLE dc_deviations AS
SELECT s.id AS id, abs(s.x - t.median) AS d, t.n AS n,
       ROW_NUMBER() OVER (PARTITION BY s.id ORDER BY abs(s.x - t.median)) - 1 AS r
FROM dc_samples s JOIN dc_stats t ON t.id = s.id;

CREATE TEMP TABLE dc_mad AS
SELECT id, CASE WHEN max(n) % 2 = 1 THEN max(CASE WHEN r = n / 2 THEN d END)
                ELSE 0.5 * (max(CASE WHEN r = n / 2 - 1 THEN d END) + max(CASE WHEN r = n / 2 THEN d END))
           END AS mad_us
FROM dc_deviations GROUP BY id;

-- The samples kept: position k is sample i * n / 256 for some i < 256 (all when n <= 256).
CREATE TEMP TABLE dc_kept AS
SELECT id, json_group_array(x) AS samples_json
FROM (SELECT id, k, x FROM dc_samples
      WHERE n <= 256 OR (((k * 256 + n - 1) / n) * n / 256 = k AND (k * 256 + n - 1) / n < 256)
      ORDER BY id, k)
GROUP BY id;

INSERT INTO measurements_new(id, variant_id, gpu_type, worker_id, status, error, samples_json,
  n_samples, median_us, min_us, spread, max_rel_error, registers, spill_bytes, smem_bytes,
  compile_seconds, estimate_us, source_hash, nvrtc_version, nvrtc_major, driver_version,
  emulated, attempts, finished_ms, recorded_ms, import_id, p10_us, p90_us, mean_us, mad_us)
SELECT m.id, m.variant_id, m.gpu_type, m.worker_id, m.status, m.error,
  ifnull(k.samples_json, '[]'), m.n_samples, m.median_us, m.min_us, m.spread, m.max_rel_error,
  m.registers, m.spill_bytes, m.smem_bytes, m.compile_seconds, m.estimate_us, m.source_hash,
  m.nvrtc_version, m.nvrtc_major, m.driver_version, m.emulated, m.attempts, m.finished_ms,
  m.recorded_ms, m.import_id, ifnull(t.p10_us, 0), ifnull(t.p90_us, 0), ifnull(t.mean_us, 0),
  ifnull(d.mad_us, 0)
FROM measurements m
LEFT JOIN dc_stats t ON t.id = m.id
LEFT JOIN dc_mad d ON d.id = m.id
LEFT JOIN dc_kept k ON k.id = m.id;

DROP TABLE dc_samples;
DROP TABLE dc_stats;
DROP TABLE dc_deviations;
DROP TABLE dc_mad;
DROP TABLE dc_kept;

-- The views that read measurements by name (ok_measurements, and those built on it) must
-- not be rewritten to the old table: drop it first, then give the new one its name with the
-- legacy rename, which leaves the views' text alone; they read the new table.
PRAGMA legacy_alter_table = ON;
DROP TABLE measurements;
ALTER TABLE measurements_new RENAME TO measurements;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX measurements_lookup ON measurements(variant_id, gpu_type, emulated, status);
