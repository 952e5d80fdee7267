// Compile evidence for the tensor-core GEMM family on the three exported models, run by hand
// (docs/bench/compile-all.md has the figures):
//   DC_MODELS_DIR=models dc_unit_tests --gtest_also_run_disabled_tests
//       --gtest_filter='CompileModelsMma.*'   (DC_MMA_PATH=fp16|bf16|tf32, DC_COMPILE_KEPT=1)
// For every GEMM/conv workload of ResNet-50, MobileNetV2 and BERT-base (candidate clusters,
// deduplicated), with the tensors stored as a plan of that precision stores them (f16/bf16
// for fp16/bf16, f32 for tf32: the cluster's inputs, intermediates and outputs), the
// estimator's pruned top-K over {path, fp32} on each GPU is taken; its first tensor-core
// variant is compiled with NVRTC for the GPU's architecture and must compile without spills;
// with DC_COMPILE_KEPT=1 every kept tensor-core variant is compiled too (and must compile).
// One CSV line per compile on stdout: MMACOMPILE,model,gpu,rank,key,registers,spill bytes,ok.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "candidates.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "nvrtc.h"
#include "onnx/import.h"
#include "param_space.h"
#include "passes/simplify.h"
#include "prune.h"

namespace dc {
namespace {

struct Job {
  std::string model, gpu;
  int rank = 0;  // 0: the first tensor-core variant of the kept list
  Workload w;
  Variant v;
  std::string arch;
};

// The workload with its float tensors stored as `t` (the heavy op's inputs, intermediates
// and outputs), as the precision policy stores a GEMM cluster's tensors.
Workload stored_as(Workload w, DType t) {
  if (t == DType::f32) return w;
  for (auto& [name, info] : w.graph.tensors)
    if (info.dtype == DType::f32 && !w.graph.is_constant(name)) info.dtype = t;
  return w;
}

TEST(CompileModelsMma, DISABLED_KeptTensorCoreVariantsCompile) {
  const char* dir = std::getenv("DC_MODELS_DIR");
  ASSERT_NE(dir, nullptr) << "DC_MODELS_DIR must name the exported models' folder";
  const bool all_kept = std::getenv("DC_COMPILE_KEPT") != nullptr;
  const char* path_env = std::getenv("DC_MMA_PATH");
  const std::string path = path_env ? path_env : "fp16";
  const DType storage = path == "fp16" ? DType::f16 : path == "bf16" ? DType::bf16 : DType::f32;
  const GpuCatalog catalog = GpuCatalog::builtin();
  const std::vector<std::string> gpus = {"a100", "a10", "l4", "h100"};  // sm_80/86/89/90
  std::vector<Job> jobs;
  const char* only = std::getenv("DC_MODEL");
  for (const char* model : {"resnet50", "mobilenetv2", "bert_base"}) {
    if (only != nullptr && std::string(only) != model) continue;
    const std::string file = std::string(dir) + "/" + model + "/model.onnx";
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    const Graph g = simplify(import_onnx_file(file));
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    for (const auto& w0 : set.workloads) {
      const WorkloadShape s = analyze_workload(w0);
      if (s.family != Family::gemm && s.family != Family::conv) continue;
      const Workload w = stored_as(w0, storage);
      for (const auto& gpu_name : gpus) {
        const GpuSpec& gpu = catalog.require(gpu_name);
        const auto kept = prune(score_variants(w, gpu, {}, SpaceOptions{{path, std::string("fp32")}}),
                                PruneOptions{});
        int rank = 0;
        for (const auto& sv : kept) {
          if (sv.variant.precision != path) continue;
          jobs.push_back({model, gpu_name, rank, w, sv.variant, gpu.sm_arch()});
          ++rank;
          if (!all_kept) break;
        }
        EXPECT_GT(rank, 0) << model << " " << gpu_name << ": no kept " << path << " variant for "
                           << w.canonical;
      }
    }
  }
  std::printf("MMACOMPILE jobs %zu\n", jobs.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  int failed = 0, spilled_first = 0;
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const Job& j = jobs[i];
      const CompileResult r = compile_cuda(generate_kernel(j.w, j.v).source, j.arch);
      int regs = 0, spill = 0;
      for (const auto& k : r.kernels) {
        regs = std::max(regs, k.registers);
        spill = std::max(spill, k.spill_stores_bytes + k.spill_loads_bytes);
      }
      std::lock_guard<std::mutex> lock(mu);
      std::printf("MMACOMPILE,%s,%s,%d,%s,%d,%d,%d,%d\n", j.model.c_str(), j.gpu.c_str(), j.rank,
                  j.v.key().c_str(), j.v.regs_per_thread, regs, spill, r.ok ? 1 : 0);
      std::fflush(stdout);
      if (!r.ok) {
        ++failed;
        ADD_FAILURE() << j.v.key() << " on " << j.arch << ": " << r.error;
      }
      if (j.rank == 0 && spill > 0) {
        ++spilled_first;
        ADD_FAILURE() << "first choice spills " << spill << " bytes: " << j.v.key() << " on " << j.arch;
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  std::printf("MMACOMPILE done: %zu kernels, %d failed, %d first choices spilled\n", jobs.size(),
              failed, spilled_first);
}

}  // namespace
}  // namespace dc
