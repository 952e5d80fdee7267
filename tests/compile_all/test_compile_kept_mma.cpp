// Every kept tensor-core variant of ResNet-50, MobileNetV2 and BERT-base, compiled with NVRTC
// for the architecture of each GPU it was ranked for (a100 sm_80, a10 sm_86, l4 sm_89, h100
// sm_90), through compile_batch (one NVRTC program per batch of sources, identical sources
// compiled once). Label `compile_all` (tests/compile_all.cmake); scripts/compile_kept_variants.sh
// runs all of it; docs/bench/compile-all.md has the figures.
//
// For every GEMM/conv workload of the models (candidate clusters, deduplicated), with the
// tensors stored as a plan of the path stores them (f16/bf16 for fp16/bf16, f32 for tf32),
// the estimator's pruned top-K over {path, fp32} on each GPU is taken; its tensor-core
// variants are compiled. Every one must compile; the first (the variant the estimator ranks
// first among the path's) must not spill. Compiles that spill are compiled again with ptxas
// told one block per SM suffices (CompileOptions::retry_spills, docs/compilation.md); the
// figures are those of the kept compile.
//
// Environment: DC_MODELS_DIR (required), DC_MMA_PATH (tf32, fp16 or bf16; default fp16),
// DC_MODEL (one model), DC_GPUS (default a100,a10,l4,h100), DC_FIRST_ONLY=1 (rank 0 only),
// DC_BATCH (sources per NVRTC program, default 32; 1 = each alone), DC_THREADS (default 2),
// DC_COUNT_ONLY=1 (generate and count, compile nothing), DC_DUMP (a folder: each job's
// source as JOB_ARCH.cu, for a look with nvcc -Xptxas -v), DC_STAGED_ONLY=1 (only variants
// with an operand through registers: the data of the register estimate's staging terms),
// DC_REUSE (the CSV of an earlier run of the same selection: a job whose line in it, at the
// same position, names the same model, GPU, rank, variant and workload figures takes that
// line's ptxas figures instead of a compile; for before/after runs of an estimator change,
// where most choices stay),
// DC_FIGURES (a file of ptxas figures per (arch, source) unit, figures_store.h: units found in
// it are not compiled again, units compiled are appended as each batch ends, so a stopped run
// resumes; scripts/compile_kept_variants.sh keeps one per output folder),
// DC_CSV (a file for the per-kernel lines
// `model,gpu,arch,path,rank,key,estimated regs,registers,spill bytes,ok,` then the workload's
// figures that move ptxas's count (docs/bench/registers.md, session 6:
// `m,n,k,batch,conv,gather,a_copy,b_copy,nodes,k_tiles`: a_copy/b_copy the cp.async bytes per
// copy of each operand, 0 through registers; nodes the cluster's node count, the epilogue and
// prologue beside the GEMM; k_tiles the K loop's trip count per split).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "candidates.h"
#include "compile_batch.h"
#include "figures_store.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "onnx/import.h"
#include "param_space.h"
#include "passes/simplify.h"
#include "prune.h"

namespace dc {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The workload with its float tensors stored as `t` (the heavy op's inputs, intermediates
// and outputs), as the precision policy stores a GEMM cluster's tensors.
Workload stored_as(Workload w, DType t) {
  if (t == DType::f32) return w;
  for (auto& [name, info] : w.graph.tensors)
    if (info.dtype == DType::f32 && !w.graph.is_constant(name)) info.dtype = t;
  return w;
}

struct Job {
  std::string model, gpu, arch;
  int rank = 0;  // among the path's kept variants, in the estimator's order
  std::string key;
  int estimated_regs = 0;
  size_t unit = 0;  // index into the distinct (arch, source) units
  std::string features;  // the CSV's workload columns
};

bool has_staged_operand(const WorkloadShape& s, const Variant& v) {
  const int64_t bk = v.param("block_k");
  return gemm_mma_copy_bytes(s, true, v.precision, v.param("block_m"), bk, v.threads_per_block) == 0 ||
         gemm_mma_copy_bytes(s, false, v.precision, v.param("block_n"), bk, v.threads_per_block) == 0;
}

// The workload columns of the CSV (see the header comment).
std::string workload_features(const Workload& w, const WorkloadShape& s, const Variant& v) {
  const int64_t bm = v.param("block_m"), bn = v.param("block_n"), bk = v.param("block_k");
  const int64_t threads = v.threads_per_block;
  const int64_t split = std::max<int64_t>(1, v.param_or("split_k", 1));
  const int64_t k_tiles = (s.k + split * bk - 1) / (split * bk);
  std::ostringstream f;
  f << s.m << ',' << s.n << ',' << s.k << ',' << s.batch << ','
    << (s.family == Family::conv ? 1 : 0) << ',' << (s.gather_a ? 1 : 0) << ','
    << gemm_mma_copy_bytes(s, true, v.precision, bm, bk, threads) << ','
    << gemm_mma_copy_bytes(s, false, v.precision, bn, bk, threads) << ','
    << w.graph.nodes.size() << ',' << k_tiles;
  return f.str();
}

struct Unit {
  std::string arch;
  GeneratedKernel kernel;
  BatchItemResult result;
};

TEST(CompileKeptMma, EveryKeptTensorCoreVariantCompiles) {
  const std::string dir = env_or("DC_MODELS_DIR", "");
  ASSERT_FALSE(dir.empty()) << "DC_MODELS_DIR must name the exported models' folder";
  const std::string path = env_or("DC_MMA_PATH", "fp16");
  ASSERT_TRUE(path == "tf32" || path == "fp16" || path == "bf16") << path;
  const DType storage = path == "fp16" ? DType::f16 : path == "bf16" ? DType::bf16 : DType::f32;
  const bool first_only = env_or("DC_FIRST_ONLY", "0") == "1";
  const bool staged_only = env_or("DC_STAGED_ONLY", "0") == "1";
  const size_t batch = static_cast<size_t>(std::max(1, std::stoi(env_or("DC_BATCH", "32"))));
  const int threads = std::max(1, std::stoi(env_or("DC_THREADS", "2")));
  const std::string only = env_or("DC_MODEL", "");
  const GpuCatalog catalog = GpuCatalog::builtin();
  const auto gpus = split_commas(env_or("DC_GPUS", "a100,a10,l4,h100"));

  const auto start = std::chrono::steady_clock::now();
  std::vector<Job> jobs;
  std::vector<Unit> units;
  std::map<std::pair<std::string, std::string>, size_t> unit_of;  // (arch, source) -> unit
  for (const char* model : {"resnet50", "mobilenetv2", "bert_base"}) {
    if (!only.empty() && only != model) continue;
    const std::string file = dir + "/" + model + "/model.onnx";
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    const Graph g = simplify(import_onnx_file(file));
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    for (const auto& w0 : set.workloads) {
      const WorkloadShape s = analyze_workload(w0);
      if (s.family != Family::gemm && s.family != Family::conv) continue;
      const Workload w = stored_as(w0, storage);
      const WorkloadShape stored = analyze_workload(w);
      for (const auto& gpu_name : gpus) {
        const GpuSpec& gpu = catalog.require(gpu_name);
        const auto kept = prune(score_variants(w, gpu, {}, SpaceOptions{{path, std::string("fp32")}}),
                                PruneOptions{});
        int rank = 0;
        for (const auto& sv : kept) {
          if (sv.variant.precision != path) continue;
          Job j{model, gpu_name, gpu.sm_arch(), rank++, sv.variant.key(),
                sv.variant.regs_per_thread, 0, workload_features(w, stored, sv.variant)};
          if (staged_only && !has_staged_operand(stored, sv.variant)) continue;
          GeneratedKernel k = generate_kernel(w, sv.variant);
          const auto id = std::make_pair(j.arch, k.source);
          const auto [it, inserted] = unit_of.emplace(id, units.size());
          if (inserted) units.push_back({j.arch, std::move(k), {}});
          j.unit = it->second;
          jobs.push_back(std::move(j));
          if (first_only) break;
        }
        EXPECT_GT(rank, 0) << model << " " << gpu_name << ": no kept " << path << " variant for "
                           << w.canonical;
      }
    }
  }
  // Figures of an earlier run, job by job (the enumeration is deterministic).
  std::vector<bool> reused(units.size(), false);
  int reused_jobs = 0;
  if (const std::string f = env_or("DC_REUSE", ""); !f.empty()) {
    std::ifstream in(f);
    ASSERT_TRUE(in) << "DC_REUSE: cannot read " << f;
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    for (size_t i = 0; i < jobs.size() && i < lines.size(); ++i) {
      const Job& j = jobs[i];
      const auto c = split_commas(lines[i]);
      // model,gpu,arch,path,rank,key (commas inside),est,regs,spill,ok,10 workload columns
      const std::string head = j.model + "," + j.gpu + "," + j.arch + "," + path + "," +
                               std::to_string(j.rank) + "," + j.key + ",";
      if (lines[i].rfind(head, 0) != 0 || c.size() < 14) continue;
      const size_t tail = lines[i].size() - j.features.size();
      if (lines[i].compare(tail, std::string::npos, j.features) != 0) continue;
      const size_t n = c.size() - 10;  // the workload columns are the last 10
      BatchItemResult r;
      r.ok = c[n - 1] == "1";
      KernelResources k;
      k.registers = std::stoi(c[n - 3]);
      k.spill_stores_bytes = std::stoi(c[n - 2]);
      r.kernels.push_back(k);
      units[j.unit].result = r;
      reused[j.unit] = true;
      ++reused_jobs;
    }
  }
  // Figures kept by earlier runs, unit by unit (exact: keyed by source, arch and NVRTC).
  FiguresStore store(env_or("DC_FIGURES", ""));
  std::vector<std::string> unit_keys(units.size());
  int stored_units = 0;
  if (store.enabled()) {
    for (size_t u = 0; u < units.size(); ++u) {
      unit_keys[u] = compile_cache_key(units[u].kernel.source, units[u].arch);
      if (reused[u]) continue;
      if (auto r = store.find(unit_keys[u])) {
        units[u].result = std::move(*r);
        reused[u] = true;
        ++stored_units;
      }
    }
  }
  const double generate_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (const std::string d = env_or("DC_DUMP", ""); !d.empty()) {
    std::filesystem::create_directories(d);
    for (size_t i = 0; i < jobs.size(); ++i)
      std::ofstream(d + "/" + std::to_string(i) + "_" + jobs[i].arch + ".cu")
          << "// " << jobs[i].model << " " << jobs[i].gpu << " " << jobs[i].key << "\n"
          << units[jobs[i].unit].kernel.source;
  }
  if (env_or("DC_COUNT_ONLY", "0") == "1") {
    std::printf("COMPILEKEPT %s: %zu kernels, %zu distinct (arch, source); generate %.0f s\n",
                path.c_str(), jobs.size(), units.size(), generate_s);
    return;
  }

  // Batches of one architecture each, taken by `threads` workers.
  std::map<std::string, std::vector<size_t>> by_arch;
  for (size_t u = 0; u < units.size(); ++u)
    if (!reused[u]) by_arch[units[u].arch].push_back(u);
  std::vector<std::pair<std::string, std::vector<size_t>>> batches;
  for (const auto& [arch, members] : by_arch)
    for (size_t b = 0; b < members.size(); b += batch)
      batches.push_back({arch, std::vector<size_t>(members.begin() + static_cast<long>(b),
                                                   members.begin() + static_cast<long>(std::min(members.size(), b + batch)))});
  size_t to_compile = 0, done_units = 0;
  for (const auto& b : batches) to_compile += b.second.size();
  std::atomic<size_t> next{0};
  std::mutex mu;
  BatchStats stats;
  auto worker = [&] {
    for (size_t i = next++; i < batches.size(); i = next++) {
      const auto& [arch, members] = batches[i];
      std::vector<const GeneratedKernel*> kernels;
      for (size_t u : members) kernels.push_back(&units[u].kernel);
      BatchStats mine;
      const auto results = compile_batch(kernels, arch, {}, &mine);
      std::lock_guard<std::mutex> lock(mu);
      for (size_t m = 0; m < members.size(); ++m) {
        units[members[m]].result = results[m];
        store.append(unit_keys[members[m]], results[m]);
      }
      stats.programs += mine.programs;
      stats.seconds += mine.seconds;
      done_units += members.size();
      std::fprintf(stderr, "compiled %zu of %zu units (%s batch of %zu, %.0f s CPU)\n", done_units,
                   to_compile, arch.c_str(), members.size(), mine.seconds);
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::ofstream csv;
  if (const std::string f = env_or("DC_CSV", ""); !f.empty()) csv.open(f);
  struct Tally {
    int kernels = 0, failed = 0, spilled = 0, first_spilled = 0, max_regs = 0, max_spill = 0;
  };
  std::map<std::string, Tally> tallies;  // "model gpu"
  int failed = 0, first_spilled = 0, retried = 0;
  for (const Unit& u : units) retried += u.result.spill_retried ? 1 : 0;
  for (const Job& j : jobs) {
    const BatchItemResult& r = units[j.unit].result;
    int regs = 0, spill = 0;
    for (const auto& k : r.kernels) {
      regs = std::max(regs, k.registers);
      spill = std::max(spill, k.spill_stores_bytes + k.spill_loads_bytes);
    }
    if (csv)
      csv << j.model << ',' << j.gpu << ',' << j.arch << ',' << path << ',' << j.rank << ','
          << j.key << ',' << j.estimated_regs << ',' << regs << ',' << spill << ','
          << (r.ok ? 1 : 0) << ',' << j.features << '\n';
    Tally& t = tallies[j.model + " " + j.gpu + " (" + j.arch + ")"];
    ++t.kernels;
    t.max_regs = std::max(t.max_regs, regs);
    t.max_spill = std::max(t.max_spill, spill);
    if (spill > 0) ++t.spilled;
    if (!r.ok) {
      ++t.failed;
      ++failed;
      ADD_FAILURE() << j.key << " (" << j.model << ") on " << j.arch << ": " << r.error;
    }
    if (j.rank == 0 && spill > 0) {
      ++t.first_spilled;
      ++first_spilled;
      ADD_FAILURE() << "first choice spills " << spill << " bytes at " << regs
                    << " registers (estimated " << j.estimated_regs << "): " << j.key << " ("
                    << j.model << ") on " << j.arch;
    }
  }
  std::printf("| model GPU (arch) | path | kernels | failed | spilled | first choices spilled | max registers | max spill (B) |\n");
  for (const auto& [name, t] : tallies)
    std::printf("| %s | %s | %d | %d | %d | %d | %d | %d |\n", name.c_str(), path.c_str(),
                t.kernels, t.failed, t.spilled, t.first_spilled, t.max_regs, t.max_spill);
  std::printf("COMPILEKEPT %s: %zu kernels, %zu distinct (arch, source), %d NVRTC programs, "
              "%d failed, %d first choices spilled; %d compiled again for spills (retry_spills); "
              "%d figures reused (DC_REUSE), %d units from DC_FIGURES; generate %.0f s, NVRTC %.0f s "
              "CPU, wall %.0f s\n",
              path.c_str(), jobs.size(), units.size(), stats.programs, failed, first_spilled, retried,
              reused_jobs, stored_units, generate_s, stats.seconds, wall_s);
}

}  // namespace
}  // namespace dc
