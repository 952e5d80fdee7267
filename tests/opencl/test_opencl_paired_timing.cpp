// Paired timing on PoCL's CPU device (opencl_runner.h, OpenClAnchor; docs/farm.md, "Paired
// timing"): the first kernel timed for a workload becomes its anchor, the next ones of that
// workload are timed in turns with it and scaled by the anchor's drift, so that a device
// slowed between two jobs (here: threads that take the host's cores) ranks them as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "opencl_compile.h"
#include "opencl_dialect.h"
#include "opencl_runner.h"
#include "pocl_testing.h"
#include "prelude.h"

namespace dc {
namespace {

// A compute-bound kernel of the "workload" these tests name: `iterations` dependent FMAs per
// work-item over 8192 work-items; the second kernel does twice the first's work. Long (about
// 30 and 60 ms here) so that the scheduler's time slices, shared with the hogs below, average
// out inside each kernel: at 6 and 13 ms the paired figure under load read 0.91-1.44.
GeneratedKernel fma_kernel(const std::string& key, int iterations) {
  GeneratedKernel k;
  k.template_name = "fma_loop";
  k.variant_key = key;
  k.source = cuda_prelude() + "extern \"C\" __global__ void dc_fma_loop(float* x) {\n"
             "  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  float a = x[i], b = 1.0001f;\n"
             "  for (int k = 0; k < " + std::to_string(iterations) + "; ++k) {\n"
             "    a = fmaf(a, b, 0.5f);\n"
             "    b = fmaf(b, a, -0.25f) * 0.5f;\n"
             "  }\n"
             "  x[i] = a + b;\n"
             "}\n";
  constexpr int64_t kItems = 8192;
  k.buffers = {KernelBuffer{"x", BufferRole::output, DType::f32, Shape{kItems}, false}};
  Launch l;
  l.kernel = "dc_fma_loop";
  l.grid = {kItems / 64, 1, 1};
  l.block = {64, 1, 1};
  l.args = {0};
  k.launches = {l};
  return k;
}

std::vector<char> spir_of(const GeneratedKernel& k) {
  const OpenClCompileResult r = compile_opencl(opencl_source(k), cl().clang, pocl_cache());
  EXPECT_TRUE(r.ok) << r.error.substr(0, 2000);
  return r.binary;
}

// The anchor's kernel and one of twice its work, compiled.
struct Pair {
  GeneratedKernel a = fma_kernel("anchor", 2000), b = fma_kernel("twice", 4000);
  std::vector<char> sa = spir_of(a), sb = spir_of(b);
};

TimingOptions quick() {
  TimingOptions o;
  o.cpu_warmup_seconds = 0.2;
  o.min_samples = 21;
  o.min_total_ms = 50;
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Threads that spin on every core of the host, one per core, while they live: the device
// slowed by half by another process, as on a shared machine.
class CoreHogs {
 public:
  CoreHogs() {
    for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
      threads_.emplace_back([this] {
        volatile double x = 1;
        while (!stop_.load(std::memory_order_relaxed)) x = x * 1.0000001 + 1e-9;
      });
  }
  ~CoreHogs() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TEST(OpenClPairedTiming, ASampleIsScaledByTheAnchorsFirstMedianOverItsSampleBesideIt) {
  EXPECT_DOUBLE_EQ(paired_sample_us(100, 50, 25), 200);  // the anchor ran 2x fast: so did the device
  EXPECT_DOUBLE_EQ(paired_sample_us(100, 50, 100), 50);  // 2x slow
  EXPECT_DOUBLE_EQ(paired_sample_us(80, 40, 40), 80);    // as in the anchor's second
}

// The anchor's lifecycle: the first kernel of a workload is timed alone and becomes the
// anchor; the next one of that workload is paired with it; the anchor's own kernel timed again
// is not (it would be scaled to itself); a kernel of another workload is timed alone and
// becomes that workload's anchor.
TEST(OpenClPairedTiming, TheFirstKernelOfAWorkloadAnchorsTheNextOnes) {
  DC_REQUIRE_POCL();
  const Pair k;
  ASSERT_FALSE(k.sa.empty() || k.sb.empty());
  OpenClAnchor anchor;
  EXPECT_FALSE(anchor.holds("w"));
  const TimingResult ta = time_on_opencl(*cl().device, k.a, k.sa, {}, quick(), &anchor, "w");
  ASSERT_TRUE(ta.ok()) << ta.error;
  EXPECT_EQ(ta.paired_with, "");
  EXPECT_TRUE(anchor.holds("w"));
  EXPECT_DOUBLE_EQ(median(ta.samples_us), ta.raw_median_us);

  const TimingResult tb = time_on_opencl(*cl().device, k.b, k.sb, {}, quick(), &anchor, "w");
  ASSERT_TRUE(tb.ok()) << tb.error;
  EXPECT_EQ(tb.paired_with, "anchor");
  EXPECT_GE(tb.samples_us.size(), 21u);
  EXPECT_GT(tb.pairing_factor, 0);
  // Twice the anchor's work: about twice its first median, whatever the device did since.
  EXPECT_NEAR(median(tb.samples_us) / ta.raw_median_us, 2.0, 0.5);

  const TimingResult again = time_on_opencl(*cl().device, k.a, k.sa, {}, quick(), &anchor, "w");
  ASSERT_TRUE(again.ok()) << again.error;
  EXPECT_EQ(again.paired_with, "");

  const TimingResult other = time_on_opencl(*cl().device, k.b, k.sb, {}, quick(), &anchor, "w2");
  ASSERT_TRUE(other.ok()) << other.error;
  EXPECT_EQ(other.paired_with, "");
  EXPECT_TRUE(anchor.holds("w2"));
  EXPECT_FALSE(anchor.holds("w"));
}

// The point of it: the device slowed down between two jobs of the second kernel (threads
// spinning on every core). Its raw median grows; its paired figure, the anchor's first median
// times its ratio to the anchor beside it, stays. Without the scaling, the paired figure is the
// raw one and the test fails (4x).
TEST(OpenClPairedTiming, ADeviceSlowedBetweenTwoJobsRanksThemAsBefore) {
  DC_REQUIRE_POCL();
  const Pair k;
  ASSERT_FALSE(k.sa.empty() || k.sb.empty());
  OpenClAnchor anchor;
  const TimingResult ta = time_on_opencl(*cl().device, k.a, k.sa, {}, quick(), &anchor, "w");
  const TimingResult before = time_on_opencl(*cl().device, k.b, k.sb, {}, quick(), &anchor, "w");
  ASSERT_TRUE(ta.ok() && before.ok()) << ta.error << before.error;
  TimingResult slowed;
  {
    const CoreHogs hogs;
    slowed = time_on_opencl(*cl().device, k.b, k.sb, {}, quick(), &anchor, "w");
  }
  ASSERT_TRUE(slowed.ok()) << slowed.error;
  ASSERT_EQ(slowed.paired_with, "anchor");
  // The hogs slowed the device (else this test shows nothing) ...
  ASSERT_GT(slowed.raw_median_us, 1.3 * before.raw_median_us)
      << "raw " << slowed.raw_median_us << " us slowed vs " << before.raw_median_us << " us before";
  // ... and the paired figure stays.
  const double ratio = median(slowed.samples_us) / median(before.samples_us);
  std::cout << "before " << before.raw_median_us << " us; raw median slowed / before " << slowed.raw_median_us / before.raw_median_us << ", paired " << ratio
            << "\n";
  EXPECT_NEAR(ratio, 1.0, 0.25);
}

}  // namespace
}  // namespace dc
