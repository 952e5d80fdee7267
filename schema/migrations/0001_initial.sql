-- Tuning database, schema version 1 (docs/tuning-db.md).
-- Conventions: times are Unix milliseconds (UTC); durations of kernels are microseconds;
-- `emulated` is 0 for a real GPU and 1 for the timing model of an emulated device, and no
-- query mixes the two. Tables are STRICT (SQLite >= 3.37) so that a wrong type is an error.
-- This file runs inside one transaction; the code sets user_version after it.

-- GPU types with the spec snapshot (GpuSpec as JSON) that estimates and limits came from.
CREATE TABLE gpu_types (
  name          TEXT PRIMARY KEY,    -- canonical short name: "h100"
  arch          TEXT NOT NULL,       -- architecture family: volta, turing, ampere, ada, hopper
  cc_major      INTEGER NOT NULL,
  cc_minor      INTEGER NOT NULL,
  spec_json     TEXT NOT NULL,
  first_seen_ms INTEGER NOT NULL
) STRICT;

-- One row per worker device ("host/device"), with the toolchain it last reported.
CREATE TABLE workers (
  id             INTEGER PRIMARY KEY,
  name           TEXT NOT NULL UNIQUE,
  host           TEXT NOT NULL,
  device         TEXT NOT NULL,      -- CUDA device name, or "emulated h100"
  gpu_type       TEXT NOT NULL REFERENCES gpu_types(name),
  driver_version TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  emulated       INTEGER NOT NULL CHECK (emulated IN (0, 1)),
  first_seen_ms  INTEGER NOT NULL,
  last_seen_ms   INTEGER NOT NULL
) STRICT;

-- Model files by content: the same name with another sha256 is another model.
CREATE TABLE models (
  id            INTEGER PRIMARY KEY,
  name          TEXT NOT NULL,
  sha256        TEXT NOT NULL CHECK (length(sha256) = 64),
  first_seen_ms INTEGER NOT NULL,
  UNIQUE (name, sha256)
) STRICT;

-- Workloads by structural signature: shared by every model that contains them.
CREATE TABLE workloads (
  signature     TEXT PRIMARY KEY,    -- 16 hex digits (ir/workload.h)
  kind          TEXT NOT NULL CHECK (kind IN
                  ('gemm', 'conv', 'depthwise', 'reduction', 'elementwise', 'attention', 'opaque')),
  canonical     TEXT NOT NULL,
  flops         INTEGER NOT NULL,
  bytes         INTEGER NOT NULL,
  first_seen_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE model_workloads (
  model_id INTEGER NOT NULL REFERENCES models(id),
  workload TEXT NOT NULL REFERENCES workloads(signature),
  count    INTEGER NOT NULL CHECK (count > 0),   -- instances of the workload in the model
  PRIMARY KEY (model_id, workload)
) STRICT, WITHOUT ROWID;
CREATE INDEX model_workloads_by_workload ON model_workloads(workload);

-- Implementation variants: a point of a template's parameter space for one workload.
CREATE TABLE variants (
  id            INTEGER PRIMARY KEY,
  workload      TEXT NOT NULL REFERENCES workloads(signature),
  key           TEXT NOT NULL,       -- Variant::key(): "gemm_tiled/fp32/block_k=16,..."
  template      TEXT NOT NULL,
  precision     TEXT NOT NULL,
  params_json   TEXT NOT NULL,       -- {"block_m":128,...}
  source_hash   TEXT NOT NULL,       -- of the generated source last committed
  first_seen_ms INTEGER NOT NULL,
  UNIQUE (workload, key)
) STRICT;

-- Records brought in by `dc-db import`: where they came from and when.
CREATE TABLE imports (
  id                  INTEGER PRIMARY KEY,
  source_path         TEXT NOT NULL,
  source_user_version INTEGER NOT NULL,
  imported_ms         INTEGER NOT NULL,
  measurements_added  INTEGER NOT NULL DEFAULT 0
) STRICT;

-- One row per finished job. The same job committed twice is one row: (variant, GPU type,
-- worker, finished time) is unique and inserts are INSERT OR IGNORE.
CREATE TABLE measurements (
  id              INTEGER PRIMARY KEY,
  variant_id      INTEGER NOT NULL REFERENCES variants(id),
  gpu_type        TEXT NOT NULL REFERENCES gpu_types(name),
  worker_id       INTEGER NOT NULL REFERENCES workers(id),
  status          TEXT NOT NULL CHECK (status IN ('ok', 'compile_error', 'launch_error',
                    'runtime_fault', 'wrong_result', 'timeout', 'worker_lost', 'unsupported')),
  error           TEXT NOT NULL,
  samples_json    TEXT NOT NULL,     -- every timed sample, microseconds: [12.5,12.25,...]
  n_samples       INTEGER NOT NULL,
  median_us       REAL NOT NULL,
  min_us          REAL NOT NULL,
  spread          REAL NOT NULL,     -- (p90 - p10) / median
  max_rel_error   REAL NOT NULL,     -- vs the reference kernel
  registers       INTEGER NOT NULL,
  spill_bytes     INTEGER NOT NULL,
  smem_bytes      INTEGER NOT NULL,
  compile_seconds REAL NOT NULL,
  estimate_us     REAL NOT NULL,     -- the estimator's figure when the job was sent
  source_hash     TEXT NOT NULL,     -- of the source that ran
  nvrtc_version   TEXT NOT NULL,
  nvrtc_major     TEXT NOT NULL,     -- reuse key: results carry over within a major version
  driver_version  TEXT NOT NULL,
  emulated        INTEGER NOT NULL CHECK (emulated IN (0, 1)),
  attempts        INTEGER NOT NULL,
  finished_ms     INTEGER NOT NULL,
  recorded_ms     INTEGER NOT NULL,
  import_id       INTEGER REFERENCES imports(id),   -- NULL: committed here, not imported
  UNIQUE (variant_id, gpu_type, worker_id, finished_ms)
) STRICT;
-- Lookups go workload -> variants (by their unique key) -> measurements. No index leads
-- with gpu_type: without ANALYZE statistics the planner would take it for per-workload
-- lookups and scan every result of the GPU type.
CREATE INDEX measurements_lookup ON measurements(variant_id, gpu_type, emulated, status);

CREATE TABLE tuning_runs (
  id             INTEGER PRIMARY KEY,
  uid            TEXT NOT NULL UNIQUE,   -- random: the run's identity across merged DBs
  model_id       INTEGER NOT NULL REFERENCES models(id),
  gpu_types_json TEXT NOT NULL,      -- ["h100","a100"]
  options_json   TEXT NOT NULL,
  host           TEXT NOT NULL,      -- where the coordinator ran
  started_ms     INTEGER NOT NULL,
  ended_ms       INTEGER,            -- NULL while running (or after a kill)
  status         TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'interrupted'))
) STRICT;

-- The selected cover per run and GPU type.
CREATE TABLE plans (
  id                 INTEGER PRIMARY KEY,
  run_id             INTEGER NOT NULL REFERENCES tuning_runs(id),
  gpu_type           TEXT NOT NULL REFERENCES gpu_types(name),
  emulated           INTEGER NOT NULL CHECK (emulated IN (0, 1)),
  choices_json       TEXT NOT NULL,  -- [{"cluster":..,"workload":..,"variant":..,"measured_us":..,"estimated_us":..}]
  estimated_total_us REAL NOT NULL,
  measured_total_us  REAL NOT NULL,
  created_ms         INTEGER NOT NULL,
  UNIQUE (run_id, gpu_type)
) STRICT;

-- Every ok measurement with its names resolved: the base of the views below.
CREATE VIEW ok_measurements AS
SELECT m.id, v.workload, w.kind, v.key AS variant_key, v.template, m.gpu_type,
       CASE m.emulated WHEN 1 THEN 'emulated' ELSE 'real' END AS source,
       m.median_us, m.min_us, m.spread, m.estimate_us, m.finished_ms, wk.host
FROM measurements m
JOIN variants v ON v.id = m.variant_id
JOIN workloads w ON w.signature = v.workload
JOIN workers wk ON wk.id = m.worker_id
WHERE m.status = 'ok';

-- The fastest ok variant per workload, GPU type and source, by median.
CREATE VIEW best_variants AS
SELECT workload, kind, gpu_type, source, variant_key, template, median_us, min_us,
       estimate_us, id AS measurement_id
FROM (
  SELECT o.*, ROW_NUMBER() OVER (PARTITION BY workload, gpu_type, source
                                 ORDER BY median_us, id) AS rank
  FROM ok_measurements o
)
WHERE rank = 1;

-- Per model, GPU type and source: how much of the model is measured, and the sum of the
-- best times of its workloads weighted by their count (workloads overlap: candidate
-- clusters share nodes, so this is a measure of coverage, not the plan's time; see
-- model_plans for that).
CREATE VIEW model_totals AS
SELECT mo.id AS model_id, mo.name AS model, g.name AS gpu_type, s.source,
       COUNT(*) AS workloads,
       COUNT(b.workload) AS workloads_measured,
       SUM(CASE WHEN b.workload IS NULL THEN 0 ELSE mw.count * b.median_us END) AS best_sum_us
FROM models mo
JOIN model_workloads mw ON mw.model_id = mo.id
CROSS JOIN gpu_types g
CROSS JOIN (SELECT 'real' AS source UNION ALL SELECT 'emulated') s
LEFT JOIN best_variants b
  ON b.workload = mw.workload AND b.gpu_type = g.name AND b.source = s.source
GROUP BY mo.id, g.name, s.source
HAVING workloads_measured > 0;

-- The latest plan per model and GPU type, with its totals.
CREATE VIEW model_plans AS
SELECT model, gpu_type, source, run_id, estimated_total_us, measured_total_us, created_ms
FROM (
  SELECT mo.name AS model, p.gpu_type,
         CASE p.emulated WHEN 1 THEN 'emulated' ELSE 'real' END AS source,
         p.run_id, p.estimated_total_us, p.measured_total_us, p.created_ms,
         ROW_NUMBER() OVER (PARTITION BY mo.id, p.gpu_type, p.emulated
                            ORDER BY p.created_ms DESC, p.id DESC) AS rank
  FROM plans p
  JOIN tuning_runs r ON r.id = p.run_id
  JOIN models mo ON mo.id = r.model_id
)
WHERE rank = 1;

-- Estimate vs measurement for every ok result that had an estimate: ratio > 1 means the
-- kernel ran slower than estimated.
CREATE VIEW estimator_error AS
SELECT workload, kind, gpu_type, source, variant_key, template, estimate_us, median_us,
       median_us / estimate_us AS ratio
FROM ok_measurements
WHERE estimate_us > 0 AND median_us > 0;
