#include "farm/measurement.h"

#include <algorithm>

namespace dc {

void summarize_samples(Measurement& m) {
  if (m.samples_us.empty()) return;
  std::vector<double> s = m.samples_us;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  m.min_us = s.front();
  m.median_us = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  const double p10 = s[(n - 1) / 10], p90 = s[(n - 1) * 9 / 10];
  m.spread = m.median_us > 0 ? (p90 - p10) / m.median_us : 0;
}

}  // namespace dc
