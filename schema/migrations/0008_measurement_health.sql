-- Health figures in the tuning DB (issue 25): the NVML sample a CUDA worker takes after
-- timing (farm::DeviceHealth, worker/nvml.h) is stored with the measurement: SM clock and its
-- maximum, temperature, the clock event ("throttle") reason bits and the volatile uncorrected
-- ECC count. A device without health data (emulated, OpenCL, no NVML) stores NULL figures
-- and says why in health_note; never made-up numbers. Rows recorded before this migration:
-- every health column NULL (dc-db: "no health data (none recorded)").
-- health_ecc_uncorrected is NULL also for a sampled GPU without ECC counters.
ALTER TABLE measurements ADD COLUMN health_sm_clock_mhz INTEGER CHECK (health_sm_clock_mhz >= 0);
ALTER TABLE measurements ADD COLUMN health_max_sm_clock_mhz INTEGER CHECK (health_max_sm_clock_mhz >= 0);
ALTER TABLE measurements ADD COLUMN health_temperature_c INTEGER CHECK (health_temperature_c >= 0);
ALTER TABLE measurements ADD COLUMN health_clock_event_reasons INTEGER;
ALTER TABLE measurements ADD COLUMN health_ecc_uncorrected INTEGER CHECK (health_ecc_uncorrected >= 0);
ALTER TABLE measurements ADD COLUMN health_note TEXT;
