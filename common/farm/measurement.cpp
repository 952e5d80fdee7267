#include "farm/measurement.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace dc {

namespace {

double median_of_sorted(const std::vector<double>& s) {
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

}  // namespace

std::string describe_health(const DeviceHealthFigures& h) {
  if (!h.sampled) return "no health data (" + h.note + ")";
  std::string s = fmt::format("SM {} of {} MHz, {} C, clock event reasons {:#x}", h.sm_clock_mhz, h.max_sm_clock_mhz,
                              h.temperature_c, h.clock_event_reasons);
  s += h.ecc_known ? fmt::format(", {} uncorrected ECC errors", h.ecc_uncorrected) : ", no ECC counters";
  return s;
}

void summarize_samples(Measurement& m) {
  if (m.samples_us.empty()) return;
  std::vector<double> s = m.samples_us;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  m.n_samples = static_cast<int64_t>(n);
  m.min_us = s.front();
  m.median_us = median_of_sorted(s);
  m.p10_us = s[(n - 1) / 10];
  m.p90_us = s[(n - 1) * 9 / 10];
  m.mean_us = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(n);
  m.spread = m.median_us > 0 ? (m.p90_us - m.p10_us) / m.median_us : 0;
  for (double& x : s) x = std::fabs(x - m.median_us);
  std::sort(s.begin(), s.end());
  m.mad_us = median_of_sorted(s);
}

std::vector<double> thin_samples(const std::vector<double>& samples, size_t max) {
  const size_t n = samples.size();
  if (n <= max) return samples;
  std::vector<double> out;
  out.reserve(max);
  for (size_t i = 0; i < max; ++i) out.push_back(samples[i * n / max]);
  return out;
}

}  // namespace dc
