-- The reference kernel is measured once per workload and GPU type as the baseline of the
-- report's speedup plot; it is never a candidate, so the best variant of a workload is the
-- best of the others (as tune's selection chooses).
DROP VIEW best_variants;
CREATE VIEW best_variants AS
SELECT workload, kind, gpu_type, source, variant_key, template, median_us, min_us,
       estimate_us, id AS measurement_id
FROM (
  SELECT o.*, ROW_NUMBER() OVER (PARTITION BY workload, gpu_type, source
                                 ORDER BY median_us, id) AS rank
  FROM ok_measurements o
  WHERE o.template <> 'reference'
)
WHERE rank = 1;
