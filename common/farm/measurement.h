// What one measurement job produces: the record the worker sends back, the coordinator
// collects and the tuning DB keeps (the summary of the samples with at most 256 of them,
// the compile report and the provenance).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "farm/status.h"

namespace dc {

// The device's health after timing (farm::DeviceHealth: NVML's figures, worker/nvml.h), as
// the tuning DB stores it with the measurement. sampled false: no health data (an emulated
// or OpenCL device, no NVML, or a row recorded before dc stored it); `note` says why, and no
// figure is made up.
struct DeviceHealthFigures {
  bool sampled = false;
  std::string note;
  int64_t sm_clock_mhz = 0;
  int64_t max_sm_clock_mhz = 0;
  int64_t temperature_c = 0;
  uint64_t clock_event_reasons = 0;  // NVML's nvmlClocksEventReason* bits
  bool ecc_known = false;            // the GPU has ECC counters
  int64_t ecc_uncorrected = 0;       // volatile (since the driver loaded)
};
// One line: "SM 1980 of 1980 MHz, 45 C, clock event reasons 0x0, 0 uncorrected ECC errors",
// or "no health data (<note>)".
std::string describe_health(const DeviceHealthFigures& h);

struct Measurement {
  std::string workload;       // workload signature
  std::string variant_key;    // Variant::key()
  std::string source_hash;    // hash of the generated source that ran
  std::string gpu_type;       // canonical GPU type ("h100")
  std::string worker;         // worker id: host/device
  std::string host;           // the worker's host, from its Hello ("" = the part before '/')
  std::string device;         // the device's name from the worker's inventory ("NVIDIA H100
                              // 80GB HBM3", "emulated NVIDIA H100-SXM5-80GB"); "" = unknown
  JobStatus status = JobStatus::ok;
  std::string error;          // message for a failure status
  // The timed samples, microseconds: every one as the worker sends them; in the tuning DB at
  // most kStoredSamples of them, evenly spread over the run (thin_samples). The summary
  // below is of every sample.
  std::vector<double> samples_us;
  int64_t n_samples = 0;      // samples taken
  double median_us = 0;
  double min_us = 0;
  double p10_us = 0;          // the samples' 10th and 90th percentiles (nearest rank below)
  double p90_us = 0;
  double mean_us = 0;
  double mad_us = 0;          // median absolute deviation from the median
  double spread = 0;          // (p90 - p10) / median of the samples
  double max_rel_error = 0;   // vs the reference kernel (rel. L2)
  int registers = 0;
  int spill_bytes = 0;
  int64_t smem_bytes = 0;
  double compile_seconds = 0;
  double run_seconds = 0;     // the device busy with the job (check + timing); not stored
  DeviceHealthFigures health;  // the device after timing; logged per worker and stored
  double estimate_us = 0;     // the estimator's figure, without calibration (tune divides it out)
  std::string nvrtc_version;
  std::string driver_version;
  bool emulated = false;      // times from the timing model of an emulated device
  int attempts = 1;
  int64_t finished_unix_ms = 0;
  std::string job_id;         // the FarmJob's job_id (in memory only: the DB keeps none)
};

// The most samples a stored measurement keeps.
inline constexpr size_t kStoredSamples = 256;

// n_samples, median, min, p10, p90, mean, MAD and spread from samples_us (no-op when empty).
void summarize_samples(Measurement& m);

// At most `max` of the samples, evenly spread over the run (sample i * n / max, in order);
// all of them when there are no more.
std::vector<double> thin_samples(const std::vector<double>& samples, size_t max = kStoredSamples);

}  // namespace dc
