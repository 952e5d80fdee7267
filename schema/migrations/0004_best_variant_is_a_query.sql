-- "Best variant" has one definition, TuningDb::best_variants (schema/best_variants.cpp,
-- docs/tuning-db.md): a variant with any final failure (a winner that failed its check
-- included) is excluded, and only one toolchain major version's results count. The views
-- below ranked every ok result and did neither, so `dc-db best` and the report could list
-- as best a variant that tune excludes. They go; dc-db and tune ask the one query.
-- model_totals was built on best_variants: `dc-db models` shows that coverage now.
DROP VIEW model_totals;
DROP VIEW best_by_math;
DROP VIEW best_variants;
