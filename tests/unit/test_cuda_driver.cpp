// worker/'s GPU plumbing without a GPU: loading the driver library (missing, the toolkit's
// stub, a fake), the symbol table against cuda.h, device discovery, error classification,
// and running and timing "kernels" on the fake driver of tests/support/fake_cuda.cpp,
// whose device memory is host memory and whose kernels are built-in behaviours chosen by
// name (copy, fill_one, fill_two, accumulate, fault, resources, slow).
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "cuda_driver.h"
#include "device_discovery.h"
#include "gpu_runner.h"
#include "pass_testing.h"
#include "random_inputs.h"

namespace dc {
namespace {

// ---- the fake driver -------------------------------------------------------------------

// The fake's control functions, from the library the worker code also loads (dlopen of
// the same path returns the same handle, hence the same state).
struct FakeControl {
  void (*reset)() = nullptr;
  void (*set)(const char*, double) = nullptr;
  double (*get)(const char*) = nullptr;
};

const FakeControl& fake() {
  static const FakeControl control = [] {
    FakeControl c;
    void* h = dlopen(DC_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return c;
    c.reset = reinterpret_cast<void (*)()>(dlsym(h, "dc_fake_cuda_reset"));
    c.set = reinterpret_cast<void (*)(const char*, double)>(dlsym(h, "dc_fake_cuda_set"));
    c.get = reinterpret_cast<double (*)(const char*)>(dlsym(h, "dc_fake_cuda_get"));
    return c;
  }();
  return control;
}

std::shared_ptr<const cuda::Driver> fake_driver() {
  const cuda::DriverLoad load = cuda::load_driver(DC_FAKE_CUDA);
  EXPECT_TRUE(load.driver) << load.error;
  EXPECT_NE(fake().reset, nullptr);
  fake().reset();
  return load.driver;
}

const std::vector<char> kElf = {0x7f, 'E', 'L', 'F', 0, 0, 0, 0};

// A kernel over one f32 input "t0" and one f32 output "t1" of `n` elements, one launch.
GeneratedKernel one_launch(const std::string& kernel, int64_t threads, std::vector<int> args,
                           int64_t n = 8) {
  GeneratedKernel k;
  k.template_name = "fake";
  k.buffers = {KernelBuffer{"t0", BufferRole::input, DType::f32, {n}, false},
               KernelBuffer{"t1", BufferRole::output, DType::f32, {n}, false}};
  Launch l;
  l.kernel = kernel;
  l.block = {threads, 1, 1};
  l.args = std::move(args);
  k.launches = {l};
  return k;
}

Tensor iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f + static_cast<float>(i);
  return Tensor::from_vector<float>({n}, v);
}

uint32_t bits(float f) {
  uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// ---- loading -------------------------------------------------------------------------

TEST(CudaDriver, MissingLibraryIsAResultNamingTheLibrary) {
  const cuda::DriverLoad load = cuda::load_driver("libdc-no-such-cuda.so.1");
  EXPECT_FALSE(load.driver);
  EXPECT_FALSE(load.library_found);
  EXPECT_EQ(load.library, "libdc-no-such-cuda.so.1");
  EXPECT_NE(load.error.find("no CUDA driver"), std::string::npos) << load.error;
  EXPECT_NE(load.error.find("libdc-no-such-cuda.so.1"), std::string::npos) << load.error;
}

TEST(CudaDriver, SystemDriverNamesLibcudaWhenAbsent) {
  const cuda::DriverLoad& load = cuda::system_driver();
  EXPECT_EQ(load.library, "libcuda.so.1");
  if (load.driver) {
    EXPECT_GT(load.driver->version(), 0);
    return;
  }
  EXPECT_NE(load.error.find("no CUDA driver"), std::string::npos) << load.error;
  EXPECT_NE(load.error.find("libcuda.so.1"), std::string::npos) << load.error;
  EXPECT_EQ(&cuda::system_driver(), &load) << "loaded once per process";
}

// The toolkit's stub exports every driver symbol and fails cuInit: the loader must find
// all of them (so the names are right) and report the stub, not crash.
TEST(CudaDriver, StubLibraryResolvesEverySymbolAndFailsInit) {
  const std::string stub = std::string(DC_CUDA_STUBS_DIR) + "/libcuda.so";
  if (!std::filesystem::exists(stub)) GTEST_SKIP() << "no CUDA stub library at " << stub;
  const cuda::DriverLoad load = cuda::load_driver(stub);
  EXPECT_TRUE(load.library_found) << load.error;
  EXPECT_TRUE(load.missing_symbols.empty()) << load.error;
  EXPECT_EQ(load.init_result, CUDA_ERROR_STUB_LIBRARY);
  EXPECT_FALSE(load.driver);
  EXPECT_NE(load.error.find("cuInit"), std::string::npos) << load.error;
  EXPECT_NE(load.error.find("CUDA_ERROR_STUB_LIBRARY"), std::string::npos) << load.error;
}

#define DC_STR2(x) #x
#define DC_STR(x) DC_STR2(x)

// Every Api member has an entry, and each tries the export cuda.h's declaration names
// (cuMemAlloc -> cuMemAlloc_v2), first when that is a versioned name: the symbol's ABI is
// the one decltype typed the member with. (The only plain-name fallbacks have the same
// signature as their _v2, e.g. cuEventElapsedTime, whose _v2 came with CUDA 12.8 headers.)
TEST(CudaDriver, SymbolTableMatchesCudaHeader) {
  const std::map<std::string, std::string> want = {
      {"init", DC_STR(cuInit)},
      {"driver_get_version", DC_STR(cuDriverGetVersion)},
      {"get_error_name", DC_STR(cuGetErrorName)},
      {"get_error_string", DC_STR(cuGetErrorString)},
      {"device_get_count", DC_STR(cuDeviceGetCount)},
      {"device_get", DC_STR(cuDeviceGet)},
      {"device_get_name", DC_STR(cuDeviceGetName)},
      {"device_get_attribute", DC_STR(cuDeviceGetAttribute)},
      {"device_total_mem", DC_STR(cuDeviceTotalMem)},
      {"primary_ctx_retain", DC_STR(cuDevicePrimaryCtxRetain)},
      {"primary_ctx_release", DC_STR(cuDevicePrimaryCtxRelease)},
      {"ctx_set_current", DC_STR(cuCtxSetCurrent)},
      {"ctx_synchronize", DC_STR(cuCtxSynchronize)},
      {"mem_get_info", DC_STR(cuMemGetInfo)},
      {"module_load_data", DC_STR(cuModuleLoadData)},
      {"module_unload", DC_STR(cuModuleUnload)},
      {"module_get_function", DC_STR(cuModuleGetFunction)},
      {"func_set_attribute", DC_STR(cuFuncSetAttribute)},
      {"mem_alloc", DC_STR(cuMemAlloc)},
      {"mem_free", DC_STR(cuMemFree)},
      {"memcpy_htod", DC_STR(cuMemcpyHtoD)},
      {"memcpy_dtoh", DC_STR(cuMemcpyDtoH)},
      {"memset_d8", DC_STR(cuMemsetD8)},
      {"launch_kernel", DC_STR(cuLaunchKernel)},
      {"event_create", DC_STR(cuEventCreate)},
      {"event_record", DC_STR(cuEventRecord)},
      {"event_synchronize", DC_STR(cuEventSynchronize)},
      {"event_elapsed_time", DC_STR(cuEventElapsedTime)},
      {"event_destroy", DC_STR(cuEventDestroy)},
      {"func_get_attribute", DC_STR(cuFuncGetAttribute)},
      {"stream_create", DC_STR(cuStreamCreate)},
      {"stream_destroy", DC_STR(cuStreamDestroy)},
      {"stream_synchronize", DC_STR(cuStreamSynchronize)},
      {"stream_begin_capture", DC_STR(cuStreamBeginCapture)},
      {"stream_end_capture", DC_STR(cuStreamEndCapture)},
      {"graph_instantiate", DC_STR(cuGraphInstantiate)},
      {"graph_launch", DC_STR(cuGraphLaunch)},
      {"graph_exec_destroy", DC_STR(cuGraphExecDestroy)},
      {"graph_destroy", DC_STR(cuGraphDestroy)},
      {"memset_d8_async", DC_STR(cuMemsetD8Async)},
      {"memcpy_htod_async", DC_STR(cuMemcpyHtoDAsync)},
      {"memcpy_dtoh_async", DC_STR(cuMemcpyDtoHAsync)},
      {"memcpy_dtod_async", DC_STR(cuMemcpyDtoDAsync)},
  };
  const auto& table = cuda::api_symbols();
  EXPECT_EQ(table.size() * sizeof(void*), sizeof(cuda::Api)) << "an Api member lacks an entry";
  EXPECT_EQ(table.size(), want.size());
  std::set<std::string> members;
  for (const auto& s : table) {
    EXPECT_TRUE(members.insert(s.member).second) << s.member;
    ASSERT_TRUE(want.count(s.member)) << s.member;
    ASSERT_FALSE(s.exports.empty()) << s.member;
    const std::string header = want.at(s.member);
    std::vector<std::string> exports(s.exports.begin(), s.exports.end());
    EXPECT_NE(std::find(exports.begin(), exports.end(), header), exports.end()) << s.member;
    if (header.size() > 3 && header.compare(header.size() - 3, 3, "_v2") == 0) {
      EXPECT_EQ(exports.front(), header) << s.member;
    }
    EXPECT_EQ(exports.front().rfind("cu", 0), 0u) << s.member;
  }
  EXPECT_EQ(want.at("mem_alloc"), "cuMemAlloc_v2");  // the header renames it
  EXPECT_EQ(want.at("memcpy_htod"), "cuMemcpyHtoD_v2");
  EXPECT_EQ(want.at("graph_instantiate"), "cuGraphInstantiateWithFlags");
  EXPECT_EQ(want.at("stream_begin_capture"), "cuStreamBeginCapture_v2");
}

TEST(CudaDriver, VersionStrings) {
  EXPECT_EQ(cuda::driver_version_string(12040), "12.4");
  EXPECT_EQ(cuda::driver_version_string(13000), "13.0");
  EXPECT_EQ(cuda::driver_version_string(11080), "11.8");
  EXPECT_EQ(cuda::driver_version_string(0), "unknown");
}

TEST(CudaDriver, FakeDriverLoadsAndNamesErrors) {
  const auto d = fake_driver();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->version(), 12040);
  EXPECT_EQ(d->version_string(), "12.4");
  EXPECT_EQ(d->error_text(CUDA_ERROR_ILLEGAL_ADDRESS),
            "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)");
  // The fake cannot name 34: the loader's own table does.
  EXPECT_EQ(d->error_text(CUDA_ERROR_STUB_LIBRARY).rfind("CUDA_ERROR_STUB_LIBRARY", 0), 0u);
  EXPECT_EQ(d->error_text(static_cast<CUresult>(4242)).rfind("CUDA error 4242", 0), 0u);
  try {
    d->check(CUDA_ERROR_INVALID_VALUE, "doing X");
    ADD_FAILURE() << "no throw";
  } catch (const cuda::CudaError& e) {
    EXPECT_EQ(e.code, CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(std::string(e.what()).rfind("doing X: CUDA_ERROR_INVALID_VALUE", 0), 0u) << e.what();
  }
}

TEST(CudaDriver, RaiiHandlesReleaseWhatTheyHold) {
  const auto d = fake_driver();
  ASSERT_TRUE(d);
  {
    cuda::PrimaryContext ctx = cuda::retain_primary_context(*d, 0);
    EXPECT_EQ(fake().get("contexts"), 1);
    cuda::Module m = cuda::load_module(*d, kElf);
    cuda::Event e = cuda::create_event(*d);
    cuda::DeviceMemory a(*d, 64);
    cuda::DeviceMemory b = std::move(a);
    EXPECT_EQ(a.get(), 0u);
    EXPECT_NE(b.get(), 0u);
    EXPECT_EQ(b.bytes(), 64u);
    cuda::DeviceMemory c(*d, 0);  // at least one byte: the driver refuses 0
    EXPECT_EQ(c.bytes(), 1u);
    EXPECT_EQ(fake().get("live_allocations"), 2);
    EXPECT_EQ(fake().get("modules"), 1);
    EXPECT_EQ(fake().get("events"), 1);
    b = cuda::DeviceMemory(*d, 16);  // move-assign frees the old block
    EXPECT_EQ(fake().get("live_allocations"), 2);
  }
  EXPECT_EQ(fake().get("contexts"), 0);
  EXPECT_EQ(fake().get("live_allocations"), 0);
  EXPECT_EQ(fake().get("modules"), 0);
  EXPECT_EQ(fake().get("events"), 0);
  EXPECT_THROW(cuda::load_module(*d, {'n', 'o', 'p', 'e'}), cuda::CudaError);
}

// ---- discovery -----------------------------------------------------------------------

TEST(DeviceDiscovery, NoDriverIsAnEmptyListWithTheReason) {
  std::string why;
  const auto none = discover_devices(cuda::load_driver("libdc-no-such-cuda.so.1"),
                                     GpuCatalog::builtin(), &why);
  EXPECT_TRUE(none.empty());
  EXPECT_NE(why.find("no CUDA driver"), std::string::npos) << why;
  EXPECT_NE(why.find("libdc-no-such-cuda.so.1"), std::string::npos) << why;

  // This machine, whatever it has: never a throw, and a reason whenever the list is empty.
  std::string here;
  std::vector<DiscoveredDevice> devices;
  EXPECT_NO_THROW(devices = discover_devices(GpuCatalog::builtin(), &here));
  if (devices.empty()) {
    EXPECT_FALSE(here.empty());
  } else {
    EXPECT_TRUE(here.empty()) << here;
  }
}

TEST(DeviceDiscovery, ReportFromA100Attributes) {
  DeviceAttributes a;
  a.name = "NVIDIA A100-SXM4-40GB";
  a.cc_major = 8;
  a.sm_count = 108;
  a.clock_khz = 1410000;
  a.memory_clock_khz = 1215000;
  a.bus_width_bits = 5120;
  a.l2_bytes = 40 << 20;
  a.smem_per_block_optin = 166912;
  const DeviceReport r = device_report(a);
  EXPECT_DOUBLE_EQ(r.clock_mhz, 1410.0);
  // 2 transfers x 1215 MHz x 5120 bits / 8 = 1555.2 GB/s.
  EXPECT_NEAR(r.memory_bandwidth_gbs, 1555.2, 1e-9);
  EXPECT_EQ(r.smem_per_block, 166912);
  EXPECT_EQ(GpuCatalog::builtin().match_device(r).name, "a100");

  a.memory_clock_khz = 0;  // not reported: no bandwidth rather than a made-up one
  EXPECT_EQ(device_report(a).memory_bandwidth_gbs, 0.0);
}

TEST(DeviceDiscovery, NvrtcArchFollowsBinaryCompatibility) {
  const std::vector<std::string> nvrtc13 = {"sm_75", "sm_80", "sm_86", "sm_87", "sm_89",
                                            "sm_90", "sm_90a", "sm_100", "sm_120"};
  EXPECT_EQ(nvrtc_arch_for(8, 6, nvrtc13), "sm_86");
  EXPECT_EQ(nvrtc_arch_for(9, 0, nvrtc13), "sm_90");
  EXPECT_EQ(nvrtc_arch_for(7, 0, nvrtc13), "");  // V100 needs NVRTC 12
  EXPECT_EQ(nvrtc_arch_for(8, 9, {"sm_80", "sm_86"}), "sm_86");  // an sm_86 cubin runs on 8.9
  EXPECT_EQ(nvrtc_arch_for(8, 0, {"sm_86"}), "");   // but not the other way
  EXPECT_EQ(nvrtc_arch_for(10, 0, {"sm_90"}), "");  // nor across major versions
}

TEST(DeviceDiscovery, FakeA100IsFoundAndMapped) {
  const auto d = fake_driver();
  ASSERT_TRUE(d);
  cuda::DriverLoad load;
  load.driver = d;
  std::string why = "stale";
  const auto devices = discover_devices(load, GpuCatalog::builtin(), &why);
  ASSERT_EQ(devices.size(), 1u) << why;
  EXPECT_EQ(why, "");
  const DiscoveredDevice& x = devices[0];
  EXPECT_EQ(x.ordinal, 0);
  EXPECT_EQ(x.attributes.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(x.attributes.total_memory_bytes, int64_t{40} << 30);
  EXPECT_EQ(x.spec.name, "a100");
  EXPECT_FALSE(x.spec.generic);
  EXPECT_EQ(x.arch, "sm_80");
  EXPECT_EQ(x.driver_version, "12.4");
  EXPECT_TRUE(x.usable()) << x.problem;
  EXPECT_NEAR(x.report.memory_bandwidth_gbs, 1555.2, 1e-9);
  EXPECT_EQ(x.report.max_blocks_per_sm, 32);
  // The line ends with the NVRTC that compiles for the device (this machine's: 12.x or 13.x).
  EXPECT_EQ(describe_device(x).rfind("0: NVIDIA A100-SXM4-40GB -> a100 (sm_80, 108 SMs, 40.0 GiB, driver 12.4, NVRTC ", 0), 0u)
      << describe_device(x);

  fake().set("devices", 0);
  EXPECT_TRUE(discover_devices(load, GpuCatalog::builtin(), &why).empty());
  EXPECT_EQ(why, "no CUDA device: the driver (12.4) reports none");
  fake().reset();
}

// ---- classification and tolerances ----------------------------------------------------

TEST(GpuRunner, ClassifiesCudaErrors) {
  auto is = [](int code, JobStatus s, bool sticky) {
    const CudaErrorClass c = classify_cuda_error(code);
    EXPECT_EQ(c.status, s) << code << " is " << job_status_name(c.status);
    EXPECT_EQ(c.sticky, sticky) << code;
  };
  is(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, JobStatus::launch_error, false);  // 701
  is(CUDA_ERROR_INVALID_VALUE, JobStatus::launch_error, false);            // 1: bad grid/smem
  is(CUDA_ERROR_OUT_OF_MEMORY, JobStatus::launch_error, false);
  is(CUDA_ERROR_NOT_FOUND, JobStatus::launch_error, false);                // no such kernel
  is(CUDA_ERROR_ILLEGAL_ADDRESS, JobStatus::runtime_fault, true);          // 700
  is(CUDA_ERROR_MISALIGNED_ADDRESS, JobStatus::runtime_fault, true);
  is(CUDA_ERROR_LAUNCH_FAILED, JobStatus::runtime_fault, true);            // __trap()
  is(CUDA_ERROR_ASSERT, JobStatus::runtime_fault, true);
  is(CUDA_ERROR_UNKNOWN, JobStatus::runtime_fault, true);
  // cuda.h: "the process must be terminated and relaunched" for these too.
  is(CUDA_ERROR_CONTAINED, JobStatus::runtime_fault, true);
  is(CUDA_ERROR_TENSOR_MEMORY_LEAK, JobStatus::runtime_fault, true);
  is(CUDA_ERROR_EXTERNAL_DEVICE, JobStatus::runtime_fault, true);
  is(CUDA_ERROR_MPS_CLIENT_TERMINATED, JobStatus::runtime_fault, true);
  is(CUDA_ERROR_INVALID_CLUSTER_SIZE, JobStatus::launch_error, false);
  is(CUDA_ERROR_LAUNCH_TIMEOUT, JobStatus::timeout, true);
  is(CUDA_ERROR_NO_BINARY_FOR_GPU, JobStatus::unsupported, false);
  is(CUDA_ERROR_INVALID_IMAGE, JobStatus::unsupported, false);
  is(12345, JobStatus::runtime_fault, false);
}

TEST(GpuRunner, OpeningADeviceWithoutADriverIsAUserError) {
  if (cuda::system_driver().driver) GTEST_SKIP() << "this machine has a CUDA driver";
  try {
    GpuDevice device(0);
    ADD_FAILURE() << "opened a device without a driver";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA driver"), std::string::npos) << e.what();
  }
  const auto d = fake_driver();
  ASSERT_TRUE(d);
  EXPECT_THROW(GpuDevice(d, 3), UserError);  // the fake has one device
}

// ---- runs on the fake device ------------------------------------------------------------

TEST(GpuRunner, RunCopiesAndPoisonsUnwrittenOutputs) {
  GpuDevice dev(fake_driver(), 0);
  EXPECT_EQ(dev.name(), "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(dev.l2_bytes(), 40 << 20);

  std::vector<Tensor> bufs = {iota(8)};
  GpuRunResult r = run_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, bufs);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(bufs.size(), 2u);
  testing::expect_tensor_near(bufs[1], iota(8), 0, 0);

  // Only 5 of 8 threads: the last three elements keep the 0xff poison.
  bufs = {iota(8)};
  r = run_on_gpu(dev, one_launch("copy", 5, {0, 1}), kElf, bufs);
  ASSERT_TRUE(r.ok()) << r.error;
  const float* out = bufs[1].data<float>();
  EXPECT_EQ(out[4], 4.5f);
  for (int i = 5; i < 8; ++i) {
    EXPECT_TRUE(std::isnan(out[i])) << i;
    EXPECT_EQ(bits(out[i]), 0xffffffffu) << i;
  }
  EXPECT_EQ(fake().get("live_allocations"), 0) << "device buffers freed after the run";
  EXPECT_EQ(fake().get("modules"), 0);
}

TEST(GpuRunner, ZeroInitBuffersStartAtZero) {
  GpuDevice dev(fake_driver(), 0);
  GeneratedKernel k = one_launch("accumulate", 8, {1});
  k.buffers[1].zero_init = true;
  k.launches.push_back(k.launches[0]);  // two launches: 0 + 1 + 1
  std::vector<Tensor> bufs = {iota(8)};
  ASSERT_TRUE(run_on_gpu(dev, k, kElf, bufs).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(bufs[1].data<float>()[i], 2.f) << i;
}

TEST(GpuRunner, LaunchRefusalsAreLaunchErrorsAndTheDeviceStaysUsable) {
  GpuDevice dev(fake_driver(), 0);
  std::vector<Tensor> bufs = {iota(8)};
  GpuRunResult r = run_on_gpu(dev, one_launch("copy", 2048, {0, 1}), kElf, bufs);
  EXPECT_EQ(r.status, JobStatus::launch_error);
  EXPECT_FALSE(r.context_lost);
  EXPECT_NE(r.error.find("launch 0 (copy): cuLaunchKernel: CUDA_ERROR_INVALID_VALUE"),
            std::string::npos) << r.error;
  EXPECT_FALSE(bufs[1].defined()) << "no output from a failed run";

  r = run_on_gpu(dev, one_launch("resources", 8, {0, 1}), kElf, bufs);
  EXPECT_EQ(r.status, JobStatus::launch_error);
  EXPECT_NE(r.error.find("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), std::string::npos) << r.error;

  r = run_on_gpu(dev, one_launch("missing", 8, {0, 1}), kElf, bufs);
  EXPECT_EQ(r.status, JobStatus::launch_error);
  EXPECT_NE(r.error.find("cuModuleGetFunction"), std::string::npos) << r.error;

  GeneratedKernel big = one_launch("copy", 8, {0, 1});
  big.launches[0].dynamic_smem_bytes = 100 * 1024;  // opted in: fine on an A100
  EXPECT_TRUE(run_on_gpu(dev, big, kElf, bufs).ok());
  big.launches[0].dynamic_smem_bytes = 200 * 1024;  // beyond the 163 KiB opt-in maximum
  r = run_on_gpu(dev, big, kElf, bufs);
  EXPECT_EQ(r.status, JobStatus::launch_error);
  EXPECT_NE(r.error.find("dynamic shared memory"), std::string::npos) << r.error;

  GeneratedKernel huge = one_launch("copy", 8, {0, 1});
  huge.launches[0].grid = {int64_t{1} << 33, 1, 1};  // cannot be passed to the driver
  EXPECT_EQ(run_on_gpu(dev, huge, kElf, bufs).status, JobStatus::launch_error);

  EXPECT_EQ(run_on_gpu(dev, one_launch("copy", 8, {0, 1}), {'b', 'a', 'd', '!'}, bufs).status,
            JobStatus::unsupported);

  EXPECT_FALSE(dev.lost());
  r = run_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, bufs);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(fake().get("live_allocations"), 0);
}

TEST(GpuRunner, AFaultLosesTheContextAndLaterRunsFailFast) {
  GpuDevice dev(fake_driver(), 0);
  std::vector<Tensor> bufs = {iota(8)};
  GpuRunResult r = run_on_gpu(dev, one_launch("fault", 8, {0, 1}), kElf, bufs);
  EXPECT_EQ(r.status, JobStatus::runtime_fault);
  EXPECT_TRUE(r.context_lost);
  EXPECT_TRUE(dev.lost());
  EXPECT_NE(r.error.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << r.error;

  fake().reset();  // even if the driver recovered, the device object stays lost
  r = run_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, bufs);
  EXPECT_EQ(r.status, JobStatus::runtime_fault);
  EXPECT_TRUE(r.context_lost);
  EXPECT_NE(r.error.find("lost its context"), std::string::npos) << r.error;
  EXPECT_EQ(time_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, {iota(8)}).status,
            JobStatus::runtime_fault);
}

// Above 48 KiB of static plus dynamic shared memory a function must opt in (cuda.h: the
// default dynamic limit is 48 KiB minus the static size), to the most any launch of it uses.
TEST(GpuRunner, SharedMemoryOptInCountsStaticMemoryAndEveryLaunch) {
  GpuDevice dev(fake_driver(), 0);
  std::vector<Tensor> bufs = {iota(8)};
  fake().set("static_smem_bytes", 1024);
  GeneratedKernel k = one_launch("copy", 8, {0, 1});
  k.launches[0].dynamic_smem_bytes = 48 * 1024;  // 49 KiB in all
  GpuRunResult r = run_on_gpu(dev, k, kElf, bufs);
  EXPECT_TRUE(r.ok()) << r.error;

  fake().set("static_smem_bytes", 0);
  k.launches[0].dynamic_smem_bytes = 100 * 1024;
  k.launches.push_back(k.launches[0]);  // the same function, needing less
  k.launches[1].dynamic_smem_bytes = 60 * 1024;
  r = run_on_gpu(dev, k, kElf, bufs);
  EXPECT_TRUE(r.ok()) << r.error;
  testing::expect_tensor_near(bufs[1], iota(8), 0, 0);
}

// A fault is asynchronous: a later launch of the same run can be refused before the fault
// shows. The run must wait for what it enqueued and report the fault (context lost), or
// the device would look usable and the next job would take the blame.
TEST(GpuRunner, AFaultBeforeARefusalStillLosesTheContext) {
  GeneratedKernel k = one_launch("fault", 8, {0, 1});
  k.launches.push_back(one_launch("resources", 8, {0, 1}).launches[0]);
  {
    GpuDevice dev(fake_driver(), 0);
    std::vector<Tensor> bufs = {iota(8)};
    const GpuRunResult r = run_on_gpu(dev, k, kElf, bufs);
    EXPECT_EQ(r.status, JobStatus::runtime_fault) << r.error;
    EXPECT_TRUE(r.context_lost);
    EXPECT_TRUE(dev.lost());
    EXPECT_NE(r.error.find("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << r.error;
  }
  // Timing captures the run as a graph before running anything: the refusal comes at
  // capture, where nothing has run yet, as the launch_error it is (the capture ended,
  // nothing leaked, the device usable).
  GpuDevice dev(fake_driver(), 0);
  TimingResult t = time_on_gpu(dev, k, kElf, {iota(8)});
  EXPECT_EQ(t.status, JobStatus::launch_error) << t.error;
  EXPECT_NE(t.error.find("launch 1 (resources): cuLaunchKernel"), std::string::npos) << t.error;
  EXPECT_FALSE(t.context_lost);
  EXPECT_FALSE(dev.lost());
  EXPECT_EQ(fake().get("launches"), 0) << "nothing ran";
  EXPECT_EQ(fake().get("graphs"), 0);
  EXPECT_EQ(fake().get("graph_execs"), 0);
  EXPECT_EQ(fake().get("streams"), 0);
  EXPECT_EQ(fake().get("live_allocations"), 0);
  // A fault inside the graph's replay (the warm-up) is a sticky runtime_fault.
  t = time_on_gpu(dev, one_launch("fault", 8, {0, 1}), kElf, {iota(8)});
  EXPECT_EQ(t.status, JobStatus::runtime_fault) << t.error;
  EXPECT_TRUE(t.context_lost);
  EXPECT_TRUE(dev.lost());
  EXPECT_TRUE(t.samples_us.empty());
  EXPECT_EQ(fake().get("live_allocations"), 0);
}

TEST(GpuRunner, WrongBufferIsAnInternalError) {
  GpuDevice dev(fake_driver(), 0);
  std::vector<Tensor> bufs = {iota(7)};
  EXPECT_THROW(run_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, bufs), InternalError);
  bufs.clear();
  EXPECT_THROW(run_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, bufs), InternalError);
}

// ---- timing on the fake device (each launch advances its clock by 0.25 ms) -------------

TEST(GpuTiming, SamplesUntilTheMinimumTotal) {
  GpuDevice dev(fake_driver(), 0);
  TimingOptions o;  // 3 warm-ups, >= 10 samples, >= 50 ms
  const TimingResult r = time_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, {iota(8)}, o);
  ASSERT_TRUE(r.ok()) << r.error;
  // 50 ms / 0.25 ms: 200 samples of exactly 250 us (one to estimate, then 199).
  ASSERT_EQ(r.samples_us.size(), 200u);
  for (double s : r.samples_us) EXPECT_EQ(s, 250.0);
  EXPECT_EQ(fake().get("launches"), 203) << "3 warm-up runs + 200 samples";
  // 64 bytes of buffers: rotation would need ~2.6 million copies, so flush twice the L2.
  EXPECT_EQ(r.l2_method, "flush 80 MiB");
  EXPECT_EQ(fake().get("large_memsets"), 203);
  EXPECT_EQ(fake().get("large_memset_bytes"), 80.0 * (1 << 20));
  EXPECT_EQ(fake().get("live_allocations"), 0);
  EXPECT_EQ(fake().get("events"), 0);
  EXPECT_EQ(fake().get("graph_launches"), 203) << "every run is one graph launch";
  EXPECT_EQ(fake().get("spins"), 200) << "one spin before each timed sample, none in the warm-up";
  EXPECT_EQ(fake().get("graphs") + fake().get("graph_execs") + fake().get("streams"), 0);

  o.min_samples = 300;  // the sample count wins over the duration
  EXPECT_EQ(time_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, {iota(8)}, o).samples_us.size(), 300u);
  o.min_samples = 10;
  o.max_samples = 40;  // and the cap over both
  EXPECT_EQ(time_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, {iota(8)}, o).samples_us.size(), 40u);
}

// The min_total_ms contract holds for microsecond kernels: 50 ms of 1 us samples is 50,000
// samples, past the old cap of 10,000. Each sample is the kernel's time alone: the 10 us
// spin in front of it is outside the events.
TEST(GpuTiming, MicrosecondKernelsStillReachTheMinimumTotal) {
  GpuDevice dev(fake_driver(), 0);
  fake().set("ms_per_launch", 0.001);
  const TimingOptions o;
  const TimingResult r = time_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, {iota(8)}, o);
  ASSERT_TRUE(r.ok()) << r.error;
  double total_us = 0;
  for (double s : r.samples_us) {
    EXPECT_NEAR(s, 1.0, 1e-3) << "a sample must not include the spin";
    total_us += s;
  }
  EXPECT_GE(total_us, o.min_total_ms * 1000.0);
  EXPECT_GE(r.samples_us.size(), 49990u);
  EXPECT_LE(r.samples_us.size(), 50010u);
  EXPECT_EQ(fake().get("spins"), static_cast<double>(r.samples_us.size()));
  EXPECT_EQ(fake().get("spin_ns"), o.spin_us * 1000.0);
  EXPECT_EQ(fake().get("ptx_modules"), 1) << "the spin is loaded once per device";

  // An explicit cap still wins, and without a spin none is launched.
  TimingOptions capped;
  capped.max_samples = 10000;
  capped.spin_us = 0;
  fake().set("spins", 0);
  EXPECT_EQ(time_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, {iota(8)}, capped).samples_us.size(), 10000u);
  EXPECT_EQ(fake().get("spins"), 0);
}

// A multi-launch variant (split-K: a zeroing memset and two kernels) is timed as one
// captured CUDA graph, as the plan runtime runs it: one graph launch per run, the memset
// and both kernels inside it, nothing launched directly.
TEST(GpuTiming, MultiLaunchVariantsAreTimedAsOneGraph) {
  GpuDevice dev(fake_driver(), 0);
  GeneratedKernel k = one_launch("accumulate", 8, {1});
  k.buffers[1].zero_init = true;
  k.launches.push_back(one_launch("fill_one", 8, {1}).launches[0]);
  k.launches.push_back(one_launch("accumulate", 8, {1}).launches[0]);
  TimingOptions o;
  o.min_total_ms = 1;
  o.min_samples = 5;
  o.l2 = L2Policy::none;
  const TimingResult r = time_on_gpu(dev, k, kElf, {iota(8)}, o);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.samples_us.size(), 5u);
  for (double s : r.samples_us) EXPECT_EQ(s, 3 * 250.0) << "all three launches, one sample";
  const double runs = o.warmup_runs + 5;
  EXPECT_EQ(fake().get("graph_launches"), runs);
  EXPECT_EQ(fake().get("launches"), 3 * runs) << "every launch inside a graph";
  EXPECT_EQ(fake().get("small_memsets"), 1 + runs) << "the zeroing inside the graph too";
  EXPECT_EQ(fake().get("spins"), 5);
  EXPECT_EQ(fake().get("graphs") + fake().get("graph_execs") + fake().get("streams"), 0);
  EXPECT_EQ(fake().get("live_allocations"), 0);
}

// A driver that cannot load the spin's PTX still times (without the spin), with a warning.
TEST(GpuTiming, WithoutTheSpinTimingStillWorks) {
  GpuDevice dev(fake_driver(), 0);
  fake().set("refuse_ptx", 1);
  TimingOptions o;
  o.min_total_ms = 1;
  const TimingResult r = time_on_gpu(dev, one_launch("copy", 8, {0, 1}), kElf, {iota(8)}, o);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.samples_us.size(), 10u);
  EXPECT_EQ(fake().get("spins"), 0);
}

TEST(GpuTiming, SlowKernelsStopAtTheTimeCap) {
  GpuDevice dev(fake_driver(), 0);
  TimingOptions o;
  o.max_total_ms = 100;  // 20 ms a sample: 5 samples, though 10 were asked for
  const TimingResult r = time_on_gpu(dev, one_launch("slow", 8, {0, 1}), kElf, {iota(8)}, o);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.samples_us.size(), 5u);
  for (double s : r.samples_us) EXPECT_EQ(s, 20000.0);
}

TEST(GpuTiming, LargeBuffersRotateInsteadOfFlushing) {
  GpuDevice dev(fake_driver(), 0);
  const int64_t n = 5 << 20;  // 20 MiB in, 20 MiB out: 40 MiB a copy, L2 40 MiB
  const Tensor in(DType::f32, {n});
  const TimingResult r = time_on_gpu(dev, one_launch("noop", 8, {0, 1}, n), kElf, {in});
  ASSERT_TRUE(r.ok()) << r.error;
  // The others touched between two uses of a copy must cover 2 x L2: 1 + 80/40 = 3 copies.
  EXPECT_EQ(r.l2_method, "rotate 3 copies of 40 MiB");
  EXPECT_EQ(fake().get("large_memsets"), 3) << "only the poisoning of each copy's output";

  TimingOptions hot;
  hot.l2 = L2Policy::none;
  EXPECT_EQ(time_on_gpu(dev, one_launch("noop", 8, {0, 1}, n), kElf, {in}, hot).l2_method, "none");
}

TEST(GpuTiming, ZeroInitMemsetsAreInsideEverySample) {
  GpuDevice dev(fake_driver(), 0);
  GeneratedKernel k = one_launch("accumulate", 8, {1});
  k.buffers[1].zero_init = true;
  TimingOptions o;
  o.min_total_ms = 1;
  o.min_samples = 4;
  const TimingResult r = time_on_gpu(dev, k, kElf, {iota(8)}, o);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.samples_us.size(), 4u);
  // One zeroing when the buffers are made, then one per run: 3 warm-ups + 4 samples.
  EXPECT_EQ(fake().get("small_memsets"), 1 + 3 + 4);
  EXPECT_EQ(fake().get("large_memsets"), 3 + 4) << "and one flush per run";
}

// ---- the reference check ------------------------------------------------------------------

Workload one_output_workload() {
  Workload w;
  testing::add_input(w.graph, "t0", {8});
  testing::add_node(w.graph, "Relu", {"t0"}, {"t1"});
  w.graph.tensors["t1"] = TensorInfo{DType::f32, {8}};
  w.graph.outputs = {"t1"};
  w.signature = "test";
  return w;
}

TEST(GpuRunner, CheckAgainstReference) {
  GpuDevice dev(fake_driver(), 0);
  const Workload w = one_output_workload();
  const GeneratedKernel ref = one_launch("copy", 8, {0, 1});
  const Tolerance fp32 = kernel_tolerance("fp32", DType::f32, 1);
  const std::vector<Tensor> in = random_workload_inputs(w, 1);

  ReferenceCheck c = check_against_reference(dev, w, one_launch("copy", 8, {0, 1}), kElf, ref, kElf, fp32, in);
  EXPECT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(c.max_rel_error, 0.0);

  c = check_against_reference(dev, w, one_launch("fill_two", 8, {1}), kElf, ref, kElf, fp32, in);
  EXPECT_EQ(c.status, JobStatus::wrong_result);
  EXPECT_NE(c.error.find("output t1: relative L2 error"), std::string::npos) << c.error;
  EXPECT_GT(c.max_rel_error, 0.5);  // 2 vs values in [-1, 1)

  c = check_against_reference(dev, w, one_launch("copy", 6, {0, 1}), kElf, ref, kElf, fp32, in);
  EXPECT_EQ(c.status, JobStatus::wrong_result) << "two unwritten elements (NaN) must fail";

  c = check_against_reference(dev, w, one_launch("copy", 8, {0, 1}), kElf,
                              one_launch("resources", 8, {0, 1}), kElf, fp32, in);
  EXPECT_EQ(c.status, JobStatus::launch_error);
  EXPECT_EQ(c.error.rfind("reference kernel: ", 0), 0u) << c.error;

  c = check_against_reference(dev, w, one_launch("fault", 8, {0, 1}), kElf, ref, kElf, fp32, in);
  EXPECT_EQ(c.status, JobStatus::runtime_fault);
  EXPECT_TRUE(c.context_lost);
  fake().reset();
}

// ---- random inputs ---------------------------------------------------------------------------

TEST(RandomInputs, SeededFloatsAndIndicesInRange) {
  Graph g;
  testing::add_input(g, "data", {5, 3});
  testing::add_input(g, "idx", {4, 6}, DType::i64);
  testing::add_input(g, "cols", {7}, DType::i32);
  testing::add_input(g, "flag", {16}, DType::boolean);
  testing::add_node(g, "Gather", {"data", "idx"}, {"rows"}, testing::attrs({{"axis", int64_t{0}}}));
  testing::add_node(g, "Gather", {"data", "cols"}, {"picked"}, testing::attrs({{"axis", int64_t{-1}}}));
  g.tensors["rows"] = TensorInfo{DType::f32, {4, 6, 3}};
  g.tensors["picked"] = TensorInfo{DType::f32, {5, 7}};
  g.outputs = {"rows", "picked"};
  Workload w;
  w.graph = g;

  const auto a = random_workload_inputs(w, 42);
  ASSERT_EQ(a.size(), 4u);
  const auto b = random_workload_inputs(w, 42);
  const auto c = random_workload_inputs(w, 43);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwise_equal(b[i])) << i;
  EXPECT_FALSE(a[0].bitwise_equal(c[0]));

  std::set<float> floats;
  for (float v : a[0].to_float_vector()) {
    EXPECT_GE(v, -1.f);
    EXPECT_LT(v, 1.f);
    floats.insert(v);
  }
  EXPECT_EQ(floats.size(), 15u) << "distinct, never zeros";
  for (int64_t v : a[1].to_int64_vector()) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 5);  // data has 5 rows along axis 0
  }
  for (int64_t v : a[2].to_int64_vector()) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 3);  // axis -1: 3 columns
  }
  std::set<int64_t> seen;
  for (int64_t v : a[1].to_int64_vector()) seen.insert(v);
  EXPECT_GE(seen.size(), 3u) << "24 draws over 5 rows";
  std::set<int64_t> flags;
  for (int64_t v : a[3].to_int64_vector()) flags.insert(v);
  EXPECT_EQ(flags, (std::set<int64_t>{0, 1}));
}

}  // namespace
}  // namespace dc
