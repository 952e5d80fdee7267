// The progress of a tune's measurements (coordinator/progress.h): the status line's counts,
// failures and throughput per GPU type, the closing line, and the duration format.
#include <gtest/gtest.h>

#include <sstream>

#include "progress.h"

namespace dc {
namespace {

TEST(Progress, StatusLineCountsJobsFailuresAndThroughputPerGpuType) {
  std::ostringstream out;
  Progress p(Progress::Mode::lines, &out);
  p.add_jobs("h100", 8);
  p.add_jobs("a100", 2);
  p.job_done("h100", true);
  p.job_done("h100", false);
  p.job_done("a100", true);
  const std::string line = p.status_line();
  EXPECT_EQ(line.rfind("3/10 jobs (30%), 1 failed | a100 ", 0), 0u) << line;
  EXPECT_NE(line.find(" h100 "), std::string::npos);
  EXPECT_NE(line.find("ETA"), std::string::npos);
  p.finish();
  EXPECT_EQ(out.str().rfind("tune: 3/10 jobs", 0), 0u) << out.str();
  EXPECT_EQ(format_duration(7), "0:07");
  EXPECT_EQ(format_duration(3725), "1:02:05");
}

}  // namespace
}  // namespace dc
