// The NVRTC loader (common/cuda/nvrtc_loader.h): which library compiles for which architecture,
// over fake library folders (tests/support/fake_nvrtc.cpp: a 12.9 that targets sm_50 to
// sm_90 and sm_120, a 13.0 that targets sm_75 to sm_121), and the real libraries this
// machine has (scripts/install-deps.sh installs NVRTC 12 beside the CUDA 13 toolkit).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "nvrtc.h"
#include "nvrtc_loader.h"
#include "prelude.h"

namespace dc {
namespace {
namespace fs = std::filesystem;

const std::string kFake12 = std::string(DC_FAKE_NVRTC_DIR) + "/dc_fake_nvrtc12";
const std::string kFake13 = std::string(DC_FAKE_NVRTC_DIR) + "/dc_fake_nvrtc13";
const std::string kBroken = std::string(DC_FAKE_NVRTC_DIR) + "/dc_fake_nvrtc_broken";

// A fresh empty folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("dc_nvrtc_loader_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// "12.9" for the chosen library's version, "none" for no choice.
std::string chosen(const std::vector<NvrtcLibrary>& libs, int arch) {
  const NvrtcLibrary* l = choose_nvrtc(libs, arch);
  return l == nullptr ? "none" : l->version();
}

TEST(NvrtcLoader, FakeLibrariesAnswerTheirVersionAndArchs) {
  const auto libs = discover_nvrtc({kFake12});
  ASSERT_EQ(libs.size(), 1u);
  EXPECT_EQ(libs[0].version(), "12.9");
  EXPECT_EQ(libs[0].path, kFake12 + "/libnvrtc.so.12");
  EXPECT_EQ(libs[0].archs.front(), 50);
  EXPECT_EQ(libs[0].archs.back(), 120);
  EXPECT_TRUE(libs[0].targets(70));
  EXPECT_FALSE(libs[0].targets(100));
}

TEST(NvrtcLoader, Only12) {
  const auto libs = discover_nvrtc({kFake12});
  EXPECT_EQ(chosen(libs, 70), "12.9");
  EXPECT_EQ(chosen(libs, 80), "12.9");
  EXPECT_EQ(chosen(libs, 90), "12.9");
  EXPECT_EQ(chosen(libs, 100), "none");
  EXPECT_EQ(chosen(libs, 121), "none");
}

TEST(NvrtcLoader, Only13) {
  const auto libs = discover_nvrtc({kFake13});
  EXPECT_EQ(chosen(libs, 70), "none");
  EXPECT_EQ(chosen(libs, 75), "13.0");
  EXPECT_EQ(chosen(libs, 80), "13.0");
  EXPECT_EQ(chosen(libs, 121), "13.0");
}

TEST(NvrtcLoader, BothPickTheNewestThatTargetsTheArch) {
  for (const auto& dirs : {std::vector<std::string>{kFake12, kFake13}, std::vector<std::string>{kFake13, kFake12}}) {
    const auto libs = discover_nvrtc(dirs);
    ASSERT_EQ(libs.size(), 2u);
    EXPECT_EQ(libs[0].version(), "13.0");  // newest first, whatever the search order
    EXPECT_EQ(chosen(libs, 60), "12.9");
    EXPECT_EQ(chosen(libs, 70), "12.9");
    EXPECT_EQ(chosen(libs, 72), "12.9");
    EXPECT_EQ(chosen(libs, 75), "13.0");
    EXPECT_EQ(chosen(libs, 80), "13.0");
    EXPECT_EQ(chosen(libs, 120), "13.0");  // both target it
    EXPECT_EQ(chosen(libs, 121), "13.0");
    EXPECT_EQ(chosen(libs, 99), "none");
  }
}

TEST(NvrtcLoader, Neither) {
  TempDir empty;
  const auto libs = discover_nvrtc({empty.str(), empty / "absent"});
  EXPECT_TRUE(libs.empty());
  EXPECT_EQ(chosen(libs, 70), "none");
  EXPECT_EQ(chosen(libs, 80), "none");
  EXPECT_NE(describe_nvrtc(libs).find("no NVRTC found"), std::string::npos);
}

TEST(NvrtcLoader, SameFileOrVersionTwiceCountsOnce) {
  TempDir d;
  fs::create_symlink(kFake12 + "/libnvrtc.so.12", d / "libnvrtc.so.12");
  fs::copy_file(kFake12 + "/libnvrtc.so.12", d / "libnvrtc.so.12.9.86");  // same version, another file
  const auto libs = discover_nvrtc({kFake12, d.str(), kFake12});
  ASSERT_EQ(libs.size(), 1u);
  EXPECT_EQ(libs[0].path, kFake12 + "/libnvrtc.so.12");  // the first in search order
}

TEST(NvrtcLoader, OnlyLibnvrtcSoNFilesAreOpened) {
  TempDir d;
  for (const char* name : {"libnvrtc.so", "libnvrtc-builtins.so.13.0", "libnvrtc.alt.so.13", "libnvrtc.so.13.txt"})
    fs::copy_file(kFake13 + "/libnvrtc.so.13", d / name);
  EXPECT_TRUE(discover_nvrtc({d.str()}).empty());
}

TEST(NvrtcLoader, ALibraryWithoutAnEntryPointIsSkippedWithTheReason) {
  std::vector<std::string> skipped;
  const auto libs = discover_nvrtc({kBroken, kFake13}, &skipped);
  ASSERT_EQ(libs.size(), 1u);
  EXPECT_EQ(libs[0].version(), "13.0");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("nvrtcGetPTX"), std::string::npos) << skipped[0];
  EXPECT_EQ(chosen(libs, 70), "none");  // the broken 12.8 would have targeted it
}

TEST(NvrtcLoader, InstallHintNamesThePackage) {
  EXPECT_NE(nvrtc_install_hint(70).find("nvidia-cuda-nvrtc-cu12"), std::string::npos);
  EXPECT_NE(nvrtc_install_hint(70).find("scripts/install-deps.sh"), std::string::npos);
  EXPECT_NE(nvrtc_install_hint(130).find("nvidia-cuda-nvrtc-cu13"), std::string::npos);
}

TEST(NvrtcLoader, SearchesTheToolkitsAndLdLibraryPath) {
  const char* old = std::getenv("LD_LIBRARY_PATH");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("LD_LIBRARY_PATH", "/dc/test/one::/dc/test/two", 1);
  const auto dirs = nvrtc_search_dirs();
  if (old != nullptr)
    ::setenv("LD_LIBRARY_PATH", saved.c_str(), 1);
  else
    ::unsetenv("LD_LIBRARY_PATH");
  auto at = [&](const std::string& d) { return std::find(dirs.begin(), dirs.end(), d) - dirs.begin(); };
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs.front(), DC_CUDA_LIB_DIR) << "the build's CUDA lib folder comes first";
  EXPECT_LT(at("/usr/local/cuda/lib64"), static_cast<long>(dirs.size()));
  EXPECT_LT(at("/opt/dc/nvrtc-cu12/nvidia/cuda_nvrtc/lib"), at("/usr/local/cuda/lib64"));
  EXPECT_LT(at("/dc/test/one"), at("/dc/test/two"));
  EXPECT_LT(at("/dc/test/two"), static_cast<long>(dirs.size()));
}

// This machine (scripts/install-deps.sh): NVRTC 12 from pip beside the CUDA 13 toolkit.
TEST(NvrtcLoader, InstalledLibrariesCompileEachArchWithItsNewestNvrtc) {
  ASSERT_NE(choose_nvrtc(installed_nvrtc(), 70), nullptr)
      << describe_nvrtc(installed_nvrtc()) << ": " << nvrtc_install_hint(70);
  EXPECT_EQ(nvrtc_version_for("sm_70").substr(0, 3), "12.");
  EXPECT_EQ(nvrtc_version_for("sm_80").substr(0, 3), "13.");
  EXPECT_EQ(nvrtc_version_for("sm_90a").substr(0, 3), "13.");
  const std::string source = cuda_prelude() + R"(
extern "C" __global__ void dc_k(float* y) { y[threadIdx.x] = dc_relu(y[threadIdx.x]) * 2.f; }
)";
  const CompileResult v100 = compile_cuda(source, "sm_70");
  const CompileResult a100 = compile_cuda(source, "sm_80");
  ASSERT_TRUE(v100.ok) << v100.log;
  ASSERT_TRUE(a100.ok) << a100.log;
  EXPECT_EQ(v100.nvrtc_version, nvrtc_version_for("sm_70"));
  EXPECT_EQ(a100.nvrtc_version, nvrtc_version_for("sm_80"));
  EXPECT_EQ(v100.kernels.size(), 1u);
  // The cache key names the NVRTC that compiles: an sm_70 key carries 12.x.
  EXPECT_NE(compile_cache_key(source, "sm_70"), compile_cache_key(source, "sm_80"));
}

}  // namespace
}  // namespace dc
