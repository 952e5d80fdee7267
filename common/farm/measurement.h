// What one measurement job produces: the record the worker sends back, the coordinator
// collects and the tuning DB keeps (the summary of the samples with at most 256 of them,
// the compile report and the provenance).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "farm/status.h"

namespace dc {

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
  std::string health;         // the device's health after timing, one line (farm::DeviceHealth,
                              // describe_health); logged per worker, not stored
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
