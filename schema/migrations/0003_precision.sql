-- A plan's precision (issue 12): each tuning run and plan records the precision it was
-- built for, and each workload its precision-free identity: the signature of its canonical
-- text with f16/bf16 read as f32 (ir/precision.h precision_free_signature), so that
-- `dc-db compare` finds one cluster's fp32 and fp16 workloads side by side. Workload
-- signatures themselves include dtypes, so results never cross between precisions.
ALTER TABLE tuning_runs ADD COLUMN precision TEXT NOT NULL DEFAULT 'fp32'
  CHECK (precision IN ('fp32', 'tf32', 'fp16', 'bf16'));
ALTER TABLE plans ADD COLUMN precision TEXT NOT NULL DEFAULT 'fp32'
  CHECK (precision IN ('fp32', 'tf32', 'fp16', 'bf16'));
-- Rows written before this migration: dc only wrote f32 workloads, their own identity.
ALTER TABLE workloads ADD COLUMN base_signature TEXT NOT NULL DEFAULT '';
UPDATE workloads SET base_signature = signature;
CREATE INDEX workloads_by_base ON workloads(base_signature);

-- Storage of a workload from its canonical text: fp16 or bf16 when a tensor has that
-- type, else f32 (fp32 and tf32 plans share those workloads).
CREATE VIEW workload_storage AS
SELECT signature, base_signature, kind,
       CASE WHEN instr(canonical, 'bf16[') > 0 THEN 'bf16'
            WHEN instr(canonical, 'f16[') > 0 THEN 'f16'
            ELSE 'f32' END AS storage
FROM workloads;

-- The best variant per workload, GPU type, source and math path (Variant::precision):
-- a plan of precision P chooses among the math paths P allows (dc-db best --precision).
CREATE VIEW best_by_math AS
SELECT workload, kind, gpu_type, source, math, variant_key, template, median_us, min_us,
       estimate_us, id AS measurement_id
FROM (
  SELECT o.*, v.precision AS math,
         ROW_NUMBER() OVER (PARTITION BY o.workload, o.gpu_type, o.source, v.precision
                            ORDER BY o.median_us, o.id) AS rank
  FROM ok_measurements o JOIN variants v ON v.workload = o.workload AND v.key = o.variant_key
  WHERE o.template <> 'reference'
)
WHERE rank = 1;
