// dc-coordinator codegen MODEL.onnx --gpus LIST --out DIR [--cluster SIG] [--top K]:
// writes the generated sources of the kept variants (and each workload's reference kernel)
// with their launch descriptions and NVRTC compile reports, so that a person can read and
// compile exactly what the farm would run.
//
// Layout: DIR/<gpu>/<signature>/{workload.txt, reference.cu, NN_<template>.cu,
//         NN_<template>.json} and DIR/<gpu>/summary.txt.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <utility>
#include <set>
#include <sstream>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "opencl_compile.h"
#include "opencl_dialect.h"
#include "cli.h"
#include "train_options.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "ir/parallel.h"
#include "ir/json_writer.h"
#include "model_loader.h"
#include "nvrtc.h"
#include "param_space_mma.h"
#include "plan_estimate.h"
#include "tune_config.h"
#include "variant_params.h"

namespace dc::cli {

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  DC_USER_CHECK(out.good(), "cannot write '", p.string(), "'");
  out << text;
  DC_USER_CHECK(out.good(), "failed writing '", p.string(), "'");
}

// The launch description and compile report of one generated kernel, as JSON.
// `load`: a tensor-core GEMM/conv variant's per-thread figures, `attention_dims` a tensor-core
// attention variant's head dimensions (D, Dv): the register fits' inputs.
std::string kernel_json(const GeneratedKernel& k, const Estimate* est, int estimated_regs,
                        const MmaThreadLoad* load, const std::pair<int64_t, int64_t>* attention_dims,
                        const CompileResult* c) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_object().field("template", k.template_name).field("variant", k.variant_key);
  j.key("buffers").begin_array();
  for (const auto& b : k.buffers) {
    j.begin_object().field("name", b.name).field("role", buffer_role_name(b.role));
    j.field("dtype", dtype_name(b.dtype)).key("shape").value(b.shape);
    j.field("zero_init", b.zero_init).end_object();
  }
  j.end_array();
  j.key("launches").begin_array();
  for (const auto& l : k.launches) {
    j.begin_object().field("kernel", l.kernel);
    j.key("grid").value(std::vector<int64_t>(l.grid.begin(), l.grid.end()));
    j.key("block").value(std::vector<int64_t>(l.block.begin(), l.block.end()));
    j.field("dynamic_smem_bytes", l.dynamic_smem_bytes);
    j.key("args").begin_array();
    for (int a : l.args) j.value(a);
    j.end_array().end_object();
  }
  j.end_array();
  if (est) j.field("estimated_seconds", est->seconds).field("bound", est->bound);
  if (estimated_regs > 0) j.field("estimated_registers", estimated_regs);  // the space's estimate
  if (load) {
    j.key("mma_thread_load").begin_object().field("moved", load->moved).field("staged", load->staged);
    j.field("scalar", load->scalar).field("gathered", load->gathered).field("plane_copies", load->plane_copies);
    j.field("narrow_copies", load->narrow_copies).field("a_copy", load->a_copy).field("b_copy", load->b_copy);
    j.field("copies", load->copies);
    j.field("k_tiles", load->k_tiles).field("conv", load->conv).end_object();
  }
  if (attention_dims) j.key("attention_dims").begin_object().field("d", attention_dims->first).field("dv", attention_dims->second).end_object();
  if (c) {
    j.key("compile").begin_object().field("arch", c->arch).field("ok", c->ok);
    j.field("nvrtc", c->nvrtc_version).field("seconds", c->compile_seconds);
    if (!c->ok) j.field("error", c->error);
    j.key("kernels").begin_array();
    for (const auto& r : c->kernels) {
      j.begin_object().field("kernel", r.kernel).field("registers", r.registers);
      j.field("spill_stores_bytes", r.spill_stores_bytes).field("spill_loads_bytes", r.spill_loads_bytes);
      j.field("static_smem_bytes", r.static_smem_bytes).field("stack_bytes", r.stack_bytes).end_object();
    }
    j.end_array().end_object();
  }
  j.end_object();
  os << "\n";
  return os.str();
}

// NVRTC for a CUDA type; for an OpenCL type the dialect layer and clang to SPIR
// (docs/opencl.md), which reports no registers.
CompileResult compile_for(const GeneratedKernel& k, const GpuSpec& gpu) {
  if (!gpu.is_opencl()) return compile_cuda(k.source, gpu.sm_arch());
  const OpenClCompileResult c = compile_opencl(opencl_source(k), opencl_clang_for(""), "");
  CompileResult r;
  r.ok = c.ok;
  r.error = c.error;
  r.compile_seconds = c.compile_seconds;
  return r;
}

std::string resources_text(const CompileResult& c) {
  if (!c.ok) return "COMPILE ERROR: " + c.error;
  std::string s;
  for (const auto& r : c.kernels)
    s += fmt::format("{}{} regs, {} B spill, {} B smem", s.empty() ? "" : "; ", r.registers,
                     r.spill_stores_bytes, r.static_smem_bytes);
  return s;
}

}  // namespace

int cmd_codegen(const std::vector<std::string>& args) {
  std::string model, gpu_list, out_dir, cluster, config;
  int top = 4;
  bool no_compile = false;
  std::vector<std::string> shapes;
  po::options_description desc(
      "usage: dc-coordinator codegen MODEL.onnx --gpus LIST --out DIR [options]\n\n"
      "Writes, per GPU type and workload, the CUDA source of the best kept variants and of\n"
      "the reference kernel, each with its launch description and NVRTC compile report\n"
      "(registers, spills, shared memory) for the GPU's architecture.\n\noptions");
  desc.add_options()
      ("help,h", "this text")
      ("gpus", po::value(&gpu_list), "comma-separated GPU types, e.g. h100")
      ("out", po::value(&out_dir), "output folder (created; existing files are overwritten)")
      ("cluster", po::value(&cluster), "only the workload with this signature (16 hex digits)")
      ("top", po::value(&top)->default_value(top),
       "kernels per workload: the K best kept variants (0: every kept variant)")
      ("no-compile", po::bool_switch(&no_compile), "write sources only, skip NVRTC")
      ("config", po::value(&config), "tuning configuration YAML (pruning, precision, calibration)")
      ("shape", po::value(&shapes)->composing(), "NAME=DIMS: fix an input's shape (repeatable)");
  add_precision_options(desc);
  add_training_options(desc);
  const auto parsed = parse_command(args, desc, &model);
  if (!parsed) return kExitOk;
  DC_USER_CHECK(!model.empty(), "codegen needs a model: dc-coordinator codegen MODEL.onnx --gpus h100 --out DIR");
  DC_USER_CHECK(!gpu_list.empty(), "codegen needs --gpus LIST");
  DC_USER_CHECK(!out_dir.empty(), "codegen needs --out DIR");
  DC_USER_CHECK(top >= 0, "--top must be >= 0");
  const GpuCatalog catalog = GpuCatalog::builtin();
  const auto gpus = parse_gpu_list(catalog, gpu_list);
  PlanOptions opts;
  if (!config.empty()) load_tune_config(config, &opts);
  read_precision_options(*parsed, &opts, gpus);
  const auto train = read_training_options(*parsed);

  ImportOptions import_opts;
  import_opts.input_shapes = parse_shape_flags(shapes);
  const LoadedModel m =
      train ? load_training_model(load_onnx(model), import_opts, *train, opts.precision,
                                  step_estimate(gpus.at(0), opts))
            : load_model(load_onnx(model), import_opts, /*simplify=*/true, opts.precision);
  const ModelPlan plan = plan_by_estimate(m.simplified, gpus, opts);
  const auto& workloads = plan.workload_set.workloads;
  if (!cluster.empty()) {
    bool found = false;
    for (const auto& w : workloads) found = found || w.signature == cluster;
    DC_USER_CHECK(found, "no workload with signature '", cluster, "' in this model (see `plan --json`)");
  }

  // Generate everything first, then compile in parallel (NVRTC is thread-safe per program).
  struct Job {
    const GpuSpec* gpu;
    fs::path dir;
    std::string stem;
    GeneratedKernel kernel;
    const Estimate* estimate;
    CompileResult compiled;
    int estimated_regs = 0;  // Variant::regs_per_thread (0: the reference kernel)
    std::optional<MmaThreadLoad> load;  // tensor-core GEMM/conv variants
    std::optional<std::pair<int64_t, int64_t>> attention_dims;  // tensor-core attention: D, Dv
  };
  std::vector<Job> jobs;
  for (const auto& gp : plan.gpus) {
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      const Workload& w = workloads[wi];
      if (!cluster.empty() && w.signature != cluster) continue;
      const fs::path wdir = fs::path(out_dir) / gp.gpu->name / w.signature;
      fs::create_directories(wdir);
      write_file(wdir / "workload.txt", w.canonical + "\n");
      jobs.push_back({gp.gpu, wdir, "reference", generate_reference(w), nullptr, {}, 0, std::nullopt, std::nullopt});
      const auto& kept = gp.workloads[wi].kept;
      const WorkloadShape shape = analyze_workload(w);
      for (size_t r = 0; r < kept.size() && (top == 0 || static_cast<int>(r) < top); ++r) {
        const Variant& v = kept[r].variant;
        jobs.push_back({gp.gpu, wdir, fmt::format("{:02d}_{}", r, v.template_name), generate_kernel(w, v),
                        &kept[r].estimate, {}, v.regs_per_thread, std::nullopt, std::nullopt});
        if (v.precision != "fp32" && (shape.family == Family::gemm || shape.family == Family::conv)) {
          const GemmParams p = GemmParams::of(v);
          jobs.back().load = gemm_mma_thread_load(shape, v.precision, p.block_m, p.block_n, p.block_k, p.split_k,
                                                  v.threads_per_block);
        }
        if (v.precision != "fp32" && shape.family == Family::attention)
          jobs.back().attention_dims = std::make_pair(shape.k, shape.dv);
      }
    }
  }
  if (!no_compile) {
    std::set<std::string> archs;
    for (const auto& j : jobs) archs.insert(j.gpu->sm_arch());
    for (const auto& arch : archs) spdlog::info("{}: NVRTC {}", arch, nvrtc_version_for(arch));
    spdlog::info("compiling {} kernels", jobs.size());
    parallel_for(static_cast<int64_t>(jobs.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) jobs[i].compiled = compile_for(jobs[i].kernel, *jobs[i].gpu);
    });
  }
  int failed = 0;
  std::map<std::string, std::string> summaries;  // per GPU
  for (const auto& j : jobs) {
    write_file(j.dir / (j.stem + ".cu"), j.kernel.source);
    if (j.gpu->is_opencl()) write_file(j.dir / (j.stem + ".clcpp"), opencl_source(j.kernel));
    write_file(j.dir / (j.stem + ".json"), kernel_json(j.kernel, j.estimate, j.estimated_regs, j.load ? &*j.load : nullptr,
                                                         j.attention_dims ? &*j.attention_dims : nullptr,
                                                         no_compile ? nullptr : &j.compiled));
    if (!no_compile && !j.compiled.ok) {
      ++failed;
      spdlog::error("{}/{}.cu does not compile for {}: {}", j.dir.string(), j.stem, j.gpu->sm_arch(), j.compiled.error);
    }
    auto& sum = summaries[j.gpu->name];
    if (sum.empty()) sum = fmt::format("{} ({}): generated kernels, best kept variants first\n", j.gpu->name, j.gpu->sm_arch());
    if (j.stem == "reference") sum += fmt::format("\n{}\n", j.dir.filename().string());
    sum += fmt::format("  {:<32} {:>11}  {}\n", j.stem + ".cu",
                       j.estimate ? fmt::format("{:.2f} us", j.estimate->seconds * 1e6) : "",
                       no_compile ? "" : resources_text(j.compiled));
  }
  for (const auto& [gpu, text] : summaries) write_file(fs::path(out_dir) / gpu / "summary.txt", text);
  const size_t written = jobs.size();
  std::cout << fmt::format("wrote {} kernels to {}{}\n", written, out_dir,
                           no_compile ? "" : fmt::format(" ({} failed to compile)", failed));
  return failed ? kExitCheckFailed : kExitOk;
}

}  // namespace dc::cli
