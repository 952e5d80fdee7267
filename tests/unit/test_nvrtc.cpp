// NVRTC compilation (common/cuda/nvrtc.h): CUBINs for the five target architectures, ptxas
// figures, compile errors as results, the compile-cache key. No GPU needed; a missing or
// broken libnvrtc makes these tests fail, never skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/error.h"
#include "nvrtc.h"
#include "prelude.h"
#include "testing.h"

namespace dc {
namespace {

const std::vector<std::string> kArchs = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90"};

// Uses the prelude (dc_relu) and a built-in vector type, as generated kernels do.
const char* kAxpy = R"(
extern "C" __global__ void dc_test_axpy(const float4* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float4 v = x[i];
    y[i] = dc_relu(v.x * 2.f + v.y) + v.z * v.w;
  }
}
DC_EXPORT_KERNEL(dc_test_axpy)
)";

std::string axpy_source() { return cuda_prelude() + kAxpy; }

int line_count(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Fails with the NVRTC log, so that a broken toolkit says why.
void expect_compiled(const CompileResult& r) {
  ASSERT_TRUE(r.ok) << "arch " << r.arch << ": " << r.error << "\n--- log ---\n" << r.log;
}

bool is_elf(const std::vector<char>& bin) {
  return bin.size() > 64 && bin[0] == 0x7f && bin[1] == 'E' && bin[2] == 'L' && bin[3] == 'F';
}

// ELF e_machine (bytes 18-19, little endian); EM_CUDA is 190.
int elf_machine(const std::vector<char>& bin) {
  return static_cast<unsigned char>(bin[18]) | (static_cast<unsigned char>(bin[19]) << 8);
}

// The SM number the CUBIN's ELF e_flags (offset 48 of an ELF64 header) names: bits 8-15 in
// CUDA 13's ELF ABI, bits 0-7 in older ones.
bool elf_names_sm(const std::vector<char>& bin, int sm) {
  uint32_t flags = 0;
  std::memcpy(&flags, bin.data() + 48, sizeof flags);
  return ((flags >> 8) & 0xffu) == static_cast<uint32_t>(sm) || (flags & 0xffu) == static_cast<uint32_t>(sm);
}

TEST(Nvrtc, LibraryLoadsWithVersionAndArchs) {
  const std::string v = nvrtc_version();
  ASSERT_NE(v, "unknown") << "libnvrtc did not answer nvrtcVersion: is the CUDA toolkit installed?";
  ASSERT_NE(v.find('.'), std::string::npos) << v;
  EXPECT_GE(std::stoi(v.substr(0, v.find('.'))), 12) << v;
  const auto archs = supported_archs();
  ASSERT_FALSE(archs.empty()) << "libnvrtc reports no supported architectures";
  for (const auto& a : kArchs)
    EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << a << " not supported";
  for (const auto& a : archs) EXPECT_EQ(a.rfind("sm_", 0), 0u) << a;
}

TEST(Nvrtc, CompilesPreludeKernelForEveryTargetArch) {
  for (const auto& arch : kArchs) {
    SCOPED_TRACE(arch);
    const CompileResult r = compile_cuda(axpy_source(), arch);
    expect_compiled(r);
    EXPECT_EQ(r.arch, arch);
    EXPECT_EQ(r.nvrtc_version, nvrtc_version_for(arch));
    EXPECT_TRUE(r.error.empty()) << r.error;
    ASSERT_TRUE(is_elf(r.cubin)) << "not an ELF CUBIN, " << r.cubin.size() << " bytes";
    EXPECT_EQ(r.cubin[4], 2);                 // ELFCLASS64
    EXPECT_EQ(elf_machine(r.cubin), 190);  // EM_CUDA
    EXPECT_TRUE(elf_names_sm(r.cubin, std::stoi(arch.substr(3))));
    EXPECT_FALSE(elf_names_sm(r.cubin, 70));  // and no other SM
    EXPECT_TRUE(r.ptx.empty());            // only with keep_ptx
    EXPECT_GT(r.compile_seconds, 0.0);
    EXPECT_NE(r.log.find("for '" + arch + "'"), std::string::npos) << r.log;
    ASSERT_EQ(r.kernels.size(), 1u) << r.log;
    const KernelResources& k = r.kernels[0];
    EXPECT_EQ(k.kernel, "dc_test_axpy");
    EXPECT_GT(k.registers, 0);
    EXPECT_LT(k.registers, 256);
    EXPECT_EQ(k.spill_stores_bytes, 0);
    EXPECT_EQ(k.spill_loads_bytes, 0);
    EXPECT_EQ(k.static_smem_bytes, 0);
    EXPECT_EQ(k.stack_bytes, 0);
    // Bank 0: the driver's 352 bytes, then the parameters (8 + 8 + 4 bytes). CUDA 13's
    // ptxas no longer reports the parameter bank for sm_90 and newer.
    if (arch == "sm_90")
      EXPECT_TRUE(k.const_bytes == 0 || k.const_bytes == 372) << k.const_bytes;
    else
      EXPECT_EQ(k.const_bytes, 372) << r.log;
  }
}

TEST(Nvrtc, StaticSharedMemoryIsReported) {
  // Two kernels: 1024 floats = 4096 bytes; 100 doubles + 10 ints = 840 bytes.
  const std::string src = cuda_prelude() + R"(
extern "C" __global__ void dc_smem_a(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float s[1024];
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = s[1023 - threadIdx.x];
}
extern "C" __global__ void dc_smem_b(const double* __restrict__ x, double* __restrict__ y) {
  __shared__ double d[100];
  __shared__ int c[10];
  d[threadIdx.x] = x[threadIdx.x];
  c[threadIdx.x % 10] = threadIdx.x;
  __syncthreads();
  y[threadIdx.x] = d[99 - threadIdx.x] + c[(threadIdx.x + 3) % 10];
}
)";
  for (const auto& arch : {std::string("sm_80"), std::string("sm_90")}) {
    SCOPED_TRACE(arch);
    const CompileResult r = compile_cuda(src, arch);
    expect_compiled(r);
    ASSERT_EQ(r.kernels.size(), 2u) << r.log;
    std::map<std::string, KernelResources> by_name;
    for (const auto& k : r.kernels) by_name[k.kernel] = k;
    ASSERT_EQ(by_name.count("dc_smem_a"), 1u);
    ASSERT_EQ(by_name.count("dc_smem_b"), 1u);
    EXPECT_EQ(by_name["dc_smem_a"].static_smem_bytes, 4096);
    EXPECT_EQ(by_name["dc_smem_b"].static_smem_bytes, 840);
  }
}

TEST(Nvrtc, LocalArrayShowsStackFrame) {
  // 256 floats indexed at run time cannot live in registers: a 1024-byte stack frame.
  const std::string src = cuda_prelude() + R"(
extern "C" __global__ void dc_local(const float* __restrict__ x, float* __restrict__ y, int n) {
  float loc[256];
  for (int j = 0; j < 256; ++j) loc[(j * 7 + n) & 255] = x[j * n];
  y[threadIdx.x] = loc[threadIdx.x & 255] + loc[n & 255];
}
)";
  const CompileResult r = compile_cuda(src, "sm_80");
  expect_compiled(r);
  ASSERT_EQ(r.kernels.size(), 1u) << r.log;
  EXPECT_GE(r.kernels[0].stack_bytes, 1024) << r.log;
  EXPECT_LT(r.kernels[0].stack_bytes, 2048) << r.log;
}

TEST(Nvrtc, RegisterCapForcesSpills) {
  // 64 values live across the whole loop nest do not fit in 32 registers.
  const std::string src = cuda_prelude() + R"(
extern "C" __global__ void dc_spill(const float* __restrict__ x, float* __restrict__ y, int n) {
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = x[j * n + threadIdx.x];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j + r) & 63] + x[j];
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 64; ++j) s += acc[j] * (float)(j + 1);
  y[threadIdx.x] = s;
}
)";
  CompileOptions capped;
  capped.max_registers = 32;
  const CompileResult r = compile_cuda(src, "sm_86", capped);
  expect_compiled(r);
  ASSERT_EQ(r.kernels.size(), 1u) << r.log;
  EXPECT_LE(r.kernels[0].registers, 32) << r.log;
  EXPECT_GT(r.kernels[0].spill_stores_bytes, 0) << r.log;
  EXPECT_GT(r.kernels[0].spill_loads_bytes, 0) << r.log;
  EXPECT_GT(r.kernels[0].stack_bytes, 0) << r.log;

  const CompileResult free_regs = compile_cuda(src, "sm_86");
  expect_compiled(free_regs);
  ASSERT_EQ(free_regs.kernels.size(), 1u);
  EXPECT_GT(free_regs.kernels[0].registers, 64) << free_regs.log;
  EXPECT_EQ(free_regs.kernels[0].spill_stores_bytes, 0) << free_regs.log;
}

TEST(Nvrtc, SyntaxErrorIsAResultWithTheLine) {
  const std::string body =
      "extern \"C\" __global__ void dc_bad(float* y) {\n"  // line P+1
      "  int i = threadIdx.x\n"                             // P+2: missing ';'
      "  y[i] = 1.f;\n"                                     // P+3: where NVRTC notices
      "}\n";
  const std::string src = cuda_prelude() + body;
  const int expected_line = line_count(cuda_prelude()) + 3;
  const CompileResult r = compile_cuda(src, "sm_80");
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.cubin.empty());
  EXPECT_TRUE(r.kernels.empty());
  EXPECT_FALSE(r.log.empty());
  const std::string where = "dc_kernel.cu(" + std::to_string(expected_line) + "): error";
  EXPECT_EQ(r.error.rfind(where, 0), 0u) << r.error;
  EXPECT_NE(r.error.find("y[i] = 1.f;"), std::string::npos) << r.error;  // the source line
  EXPECT_EQ(r.error.find("more error"), std::string::npos) << r.error;   // only one error
}

TEST(Nvrtc, SeveralErrorsAreCounted) {
  const std::string src = cuda_prelude() +
                          "extern \"C\" __global__ void dc_bad(float* y) {\n"
                          "  y[0] = undefined_a;\n"
                          "  y[1] = undefined_b;\n"
                          "  y[2] = undefined_c;\n"
                          "}\n";
  const CompileResult r = compile_cuda(src, "sm_75");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("undefined_a"), std::string::npos) << r.error;
  EXPECT_EQ(r.error.find("undefined_b"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("(2 more error(s) in the log)"), std::string::npos) << r.error;
  EXPECT_NE(r.log.find("undefined_c"), std::string::npos) << r.log;
}

TEST(Nvrtc, PtxasErrorIsAResult) {
  // 64 KiB of static shared memory exceeds the 48 KiB static limit of every target.
  const std::string src = cuda_prelude() + R"(
extern "C" __global__ void dc_too_big(float* y) {
  __shared__ float s[16384];
  s[threadIdx.x] = 1.f;
  __syncthreads();
  y[threadIdx.x] = s[16383 - threadIdx.x];
}
)";
  const CompileResult r = compile_cuda(src, "sm_80");
  EXPECT_FALSE(r.ok) << r.log;
  EXPECT_TRUE(r.cubin.empty());
  EXPECT_EQ(r.error.rfind("ptxas error", 0), 0u) << r.error;
  EXPECT_NE(r.error.find("dc_too_big"), std::string::npos) << r.error << "\n" << r.log;
  EXPECT_NE(r.error.find("too much shared data"), std::string::npos) << r.error;
  EXPECT_EQ(r.log.find('\0'), std::string::npos);  // NVRTC's inner NULs are dropped
}

TEST(Nvrtc, BadFlagIsAResultNotAnException) {
  CompileOptions o;
  o.extra_flags = {"--no-such-flag"};
  const CompileResult r = compile_cuda(axpy_source(), "sm_80", o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("--no-such-flag"), std::string::npos) << r.error;
}

TEST(Nvrtc, ExtraFlagsReachTheCompiler) {
  const std::string src = cuda_prelude() + R"(
#ifndef DC_TEST_VALUE
#error DC_TEST_VALUE not defined
#endif
extern "C" __global__ void dc_flag(float* y) { y[threadIdx.x] = DC_TEST_VALUE; }
)";
  EXPECT_FALSE(compile_cuda(src, "sm_80").ok);
  CompileOptions o;
  o.extra_flags = {"-DDC_TEST_VALUE=3.f"};
  expect_compiled(compile_cuda(src, "sm_80", o));
}

TEST(Nvrtc, UnsupportedArchIsAUserError) {
  for (const std::string bad : {"sm_35", "sm_999", "compute_80", "", "sm_", "sm_80x", "sm_75a",
                                "sm_80f", "80", "SM_80"}) {
    SCOPED_TRACE(bad);
    try {
      compile_cuda(axpy_source(), bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'" + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("sm_75, sm_80, sm_86"), std::string::npos) << msg;
    }
  }
  // A well-formed arch no installed NVRTC targets says what is installed.
  try {
    compile_cuda(axpy_source(), "sm_999");
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("NVRTC 13."), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("libnvrtc.so.13"), std::string::npos) << e.what();
  }
}

TEST(Nvrtc, ArchSpecificSuffixCompiles) {
  const CompileResult r = compile_cuda(axpy_source(), "sm_90a");
  expect_compiled(r);
  EXPECT_TRUE(is_elf(r.cubin));
}

TEST(Nvrtc, KeepPtxAndLineInfo) {
  CompileOptions o;
  o.keep_ptx = true;
  const CompileResult plain = compile_cuda(axpy_source(), "sm_80", o);
  expect_compiled(plain);
  EXPECT_NE(plain.ptx.find(".entry dc_test_axpy"), std::string::npos) << plain.ptx;
  EXPECT_NE(plain.ptx.find(".target sm_80"), std::string::npos);
  EXPECT_EQ(plain.ptx.find(".loc"), std::string::npos);
  EXPECT_EQ(plain.ptx.back(), '\n');  // no trailing NUL kept
  o.line_info = true;
  const CompileResult lines = compile_cuda(axpy_source(), "sm_80", o);
  expect_compiled(lines);
  EXPECT_NE(lines.ptx.find(".loc"), std::string::npos);
}

TEST(Nvrtc, OptionList) {
  CompileOptions o;
  EXPECT_EQ(nvrtc_options("sm_86", o),
            (std::vector<std::string>{"--gpu-architecture=sm_86", "--std=c++17",
                                      "--ptxas-options=-v"}));
  o.line_info = true;
  o.max_registers = 64;
  o.extra_flags = {"-DX=1"};
  EXPECT_EQ(nvrtc_options("sm_86", o),
            (std::vector<std::string>{"--gpu-architecture=sm_86", "--std=c++17",
                                      "--ptxas-options=-v", "--generate-line-info",
                                      "--maxrregcount=64", "-DX=1"}));
  o = {};
  o.min_blocks_per_sm = 2;
  EXPECT_EQ(nvrtc_options("sm_80", o),
            (std::vector<std::string>{"--gpu-architecture=sm_80", "--std=c++17",
                                      "--ptxas-options=-v", "--ptxas-options=--minnctapersm=2"}));
}

TEST(Nvrtc, SpillRetryOnlyWithoutARegisterBound) {
  CompileOptions o;
  EXPECT_TRUE(retries_spills(o));
  const CompileOptions again = spill_retry_options(o);
  EXPECT_EQ(again.min_blocks_per_sm, 1);
  EXPECT_FALSE(retries_spills(again));
  o.max_registers = 32;  // the caller asked for the spills (RegisterCapForcesSpills)
  EXPECT_FALSE(retries_spills(o));
  o = {};
  o.retry_spills = false;
  EXPECT_FALSE(retries_spills(o));
  EXPECT_EQ(spilled_bytes({}), 0);
  KernelResources a, b;
  a.spill_stores_bytes = 8;
  a.spill_loads_bytes = 4;
  b.spill_stores_bytes = 16;
  EXPECT_EQ(spilled_bytes({a, b}), 28);
}

TEST(Nvrtc, CacheKeyTracksEveryInput) {
  const std::string src = axpy_source();
  const std::string base = compile_cache_key(src, "sm_80");
  ASSERT_EQ(base.size(), 16u);
  EXPECT_EQ(base.find_first_not_of("0123456789abcdef"), std::string::npos) << base;
  EXPECT_EQ(compile_cache_key(src, "sm_80"), base);  // deterministic
  EXPECT_EQ(compile_cache_key(std::string(src), "sm_80", CompileOptions{}), base);

  std::set<std::string> keys = {base};
  auto add = [&](const std::string& k) { EXPECT_TRUE(keys.insert(k).second) << "collision " << k; };
  add(compile_cache_key(src, "sm_86"));
  add(compile_cache_key(src + " ", "sm_80"));
  std::string one_char = src;
  one_char[one_char.find("2.f")] = '3';
  add(compile_cache_key(one_char, "sm_80"));
  CompileOptions o;
  o.max_registers = 64;
  add(compile_cache_key(src, "sm_80", o));
  o = {};
  o.line_info = true;
  add(compile_cache_key(src, "sm_80", o));
  o = {};
  o.keep_ptx = true;
  add(compile_cache_key(src, "sm_80", o));
  o = {};
  o.extra_flags = {"-DA"};
  add(compile_cache_key(src, "sm_80", o));
  o.extra_flags = {"-DA", "-DB"};
  add(compile_cache_key(src, "sm_80", o));
  o.extra_flags = {"-DA-DB"};  // same characters, different option list
  add(compile_cache_key(src, "sm_80", o));
  o = {};
  o.retry_spills = false;
  add(compile_cache_key(src, "sm_80", o));
  o = {};
  o.min_blocks_per_sm = 1;
  add(compile_cache_key(src, "sm_80", o));
}

TEST(Nvrtc, ParallelCompileMatchesSerial) {
  const std::string src = axpy_source();
  const auto results = compile_for_archs(src, kArchs, 2);
  ASSERT_EQ(results.size(), kArchs.size());
  for (size_t i = 0; i < kArchs.size(); ++i) {
    SCOPED_TRACE(kArchs[i]);
    expect_compiled(results[i]);
    EXPECT_EQ(results[i].arch, kArchs[i]);
    const CompileResult serial = compile_cuda(src, kArchs[i]);
    expect_compiled(serial);
    EXPECT_EQ(results[i].cubin, serial.cubin);  // NVRTC is deterministic per input
    ASSERT_EQ(results[i].kernels.size(), 1u);
    EXPECT_EQ(results[i].kernels[0].registers, serial.kernels[0].registers);
  }
  // Many programs at once on more threads than jobs, and a source that fails among them.
  const auto same = compile_for_archs(src, {"sm_80", "sm_80", "sm_80", "sm_80"}, 8);
  for (const auto& r : same) {
    expect_compiled(r);
    EXPECT_EQ(r.cubin, same[0].cubin);
  }
  const auto failing = compile_for_archs(src + "\nthis is not C++;\n", {"sm_75", "sm_90"}, 2);
  ASSERT_EQ(failing.size(), 2u);
  EXPECT_FALSE(failing[0].ok);
  EXPECT_FALSE(failing[1].ok);
  EXPECT_TRUE(compile_for_archs(src, {}, 2).empty());
}

TEST(Nvrtc, ParallelCompileChecksArchsFirst) {
  EXPECT_THROW(compile_for_archs(axpy_source(), {"sm_80", "sm_35"}, 2), UserError);
}

// ptxas -v text as CUDA 13 prints it, with a non-entry function that must not become a
// kernel or lend its figures to one.
TEST(PtxasInfo, ParsesCuda13Log) {
  const std::string log =
      "ptxas info    : 0 bytes gmem, 256 bytes cmem[3]\n"
      "ptxas info    : Compiling entry function 'k2' for 'sm_80'\n"
      "ptxas info    : Function properties for k2\n"
      "ptxas         .     1024 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 1 barriers, 1040 bytes cumulative stack size, "
      "4096 bytes smem, 372 bytes cmem[0], 16 bytes cmem[2]\n"
      "ptxas info    : Compile time = 3.841 ms\n"
      "ptxas info    : Function properties for _Z2fnfi\n"
      "ptxas         .     64 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'k1' for 'sm_80'\n"
      "ptxas info    : Function properties for k1\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 0 barriers, 368 bytes cmem[0]\n";
  const auto ks = parse_ptxas_info(log);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].kernel, "k2");
  EXPECT_EQ(ks[0].registers, 32);
  EXPECT_EQ(ks[0].spill_stores_bytes, 8);
  EXPECT_EQ(ks[0].spill_loads_bytes, 12);
  EXPECT_EQ(ks[0].static_smem_bytes, 4096);
  EXPECT_EQ(ks[0].const_bytes, 388);
  EXPECT_EQ(ks[0].stack_bytes, 1040);  // cumulative > frame
  EXPECT_EQ(ks[1].kernel, "k1");
  EXPECT_EQ(ks[1].registers, 10);
  EXPECT_EQ(ks[1].spill_stores_bytes, 0);
  EXPECT_EQ(ks[1].spill_loads_bytes, 0);
  EXPECT_EQ(ks[1].static_smem_bytes, 0);
  EXPECT_EQ(ks[1].const_bytes, 368);
  EXPECT_EQ(ks[1].stack_bytes, 0);
}

// Older ptxas (CUDA 11/12.0): properties before the entry line, indented without the
// "ptxas ." prefix, no barrier or cumulative-stack fields, a mangled name.
TEST(PtxasInfo, ParsesOlderLayout) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Function properties for _Z3fooPf\n"
      "    48 bytes stack frame, 20 bytes spill stores, 24 bytes spill loads\n"
      "ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_70'\n"
      "ptxas info    : Used 255 registers, 2048 bytes smem, 360 bytes cmem[0]\n"
      "warning: something unrelated\n";
  const auto ks = parse_ptxas_info(log);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks[0].kernel, "_Z3fooPf");
  EXPECT_EQ(ks[0].registers, 255);
  EXPECT_EQ(ks[0].spill_stores_bytes, 20);
  EXPECT_EQ(ks[0].spill_loads_bytes, 24);
  EXPECT_EQ(ks[0].static_smem_bytes, 2048);
  EXPECT_EQ(ks[0].const_bytes, 360);
  EXPECT_EQ(ks[0].stack_bytes, 48);
}

TEST(PtxasInfo, EmptyOrForeignLogGivesNothing) {
  EXPECT_TRUE(parse_ptxas_info("").empty());
  EXPECT_TRUE(parse_ptxas_info("dc_kernel.cu(3): error: expected a \";\"\n").empty());
  // A "Used" line with no entry before it is ignored rather than guessed.
  EXPECT_TRUE(parse_ptxas_info("ptxas info    : Used 8 registers, 360 bytes cmem[0]\n").empty());
}

}  // namespace
}  // namespace dc
