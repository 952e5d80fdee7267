// Fixtures shared by the tuning DB tests (test_tuning_db.cpp, test_dc_db.cpp): a temporary
// directory, and small records with known values.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "farm/measurement.h"
#include "sqlite.h"
#include "gpu/gpu_spec.h"
#include "tuning_db.h"
#include "variant.h"

namespace dc::testing {

// A fresh directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = std::filesystem::temp_directory_path() /
            ("dc_tuning_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline GpuSpec test_gpu(const std::string& name, const std::string& arch, int cc_major,
                        int cc_minor) {
  GpuSpec g;
  g.name = name;
  g.full_name = "NVIDIA " + name;
  g.arch = arch;
  g.cc_major = cc_major;
  g.cc_minor = cc_minor;
  g.sm_count = 100;
  return g;
}

inline WorkerInfo test_worker(const std::string& host, const std::string& gpu, bool emulated,
                              const std::string& nvrtc = "12.4") {
  WorkerInfo w;
  w.host = host;
  w.name = host + "/0";
  w.device = emulated ? "emulated " + gpu : "NVIDIA " + gpu;
  w.gpu_type = gpu;
  w.driver_version = "550.54";
  w.nvrtc_version = nvrtc;
  w.emulated = emulated;
  return w;
}

inline WorkloadRecord test_workload(const std::string& sig, ClusterKind kind = ClusterKind::gemm) {
  return {sig, kind, "kind gemm\n" + sig + "\n", 2'000'000, 48'000, sig};
}

inline Variant test_variant(int64_t block_m, const std::string& tmpl = "gemm_tiled") {
  Variant v;
  v.template_name = tmpl;
  v.params = {{"block_m", block_m}, {"block_n", 64}};
  return v;
}

// An ok measurement of `variant` with the given median (samples around it).
inline Measurement test_measurement(const std::string& workload, const Variant& variant,
                                    const WorkerInfo& worker, double median_us,
                                    int64_t finished_ms, JobStatus status = JobStatus::ok) {
  Measurement m;
  m.workload = workload;
  m.variant_key = variant.key();
  m.source_hash = "src-" + variant.key();
  m.gpu_type = worker.gpu_type;
  m.worker = worker.name;
  m.status = status;
  if (status == JobStatus::ok) {
    m.samples_us = {median_us, median_us + 0.5, median_us - 0.5};
    summarize_samples(m);
  } else {
    m.error = "failed: " + std::string(job_status_name(status));
  }
  m.estimate_us = 4.0;
  m.nvrtc_version = worker.nvrtc_version;
  m.driver_version = worker.driver_version;
  m.emulated = worker.emulated;
  m.finished_unix_ms = finished_ms;
  return m;
}

// PRAGMA integrity_check's first line: "ok" for a sound file.
inline std::string integrity(sqlite::Connection& conn) {
  sqlite::Query q = conn.query("PRAGMA integrity_check");
  EXPECT_TRUE(q.step());
  return q.text(0);
}

// A DB with one GPU type, worker, workload, five variants and n measurements over them.
inline void fill(TuningDb& db, int n_measurements) {
  db.commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
  db.commit_worker(test_worker("node1", "h100", false));
  db.commit_workload(test_workload("w1"));
  for (int64_t bm = 16; bm <= 256; bm *= 2) db.commit_variant("w1", test_variant(bm), "h");
  for (int i = 0; i < n_measurements; ++i)
    db.commit_measurement(test_measurement("w1", test_variant(16 << (i % 5)),
                                           test_worker("node1", "h100", false), 1 + i % 17, i + 1));
}

}  // namespace dc::testing
