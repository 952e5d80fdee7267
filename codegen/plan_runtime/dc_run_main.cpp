// dc-run PLAN_DIR [--data DIR] [--bench N] [--emulate] [--train --steps N --save-weights OUT]:
// runs an execution plan (the directory `dc-coordinator tune --out DIR` writes per GPU type)
// through libdcrt's runtime; with --train, steps of a training plan (dc_run_train.h).
//
// Without --data it runs once on seeded random inputs and prints each output's statistics;
// with --data it compares every output with an ONNX test-data folder as `verify` does; with
// --bench it times N runs after warm-up on the GPU. --emulate runs on the host emulator
// (correctness only), so that a plan can be checked end to end without a GPU.
//
// Exit codes: 0 success; 1 an output differs from the test data; 2 bad input (usage, plan,
// test data, no device); 3 internal error.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include <boost/program_options.hpp>

#include "gpu/gpu_catalog.h"
#include "ir/cli_guard.h"
#include "ir/error.h"
#include "ir/log.h"
#include "ir/precision.h"
#include "onnx/test_data.h"
#include "plan/plan_io.h"
#include "ref/compare.h"
#include "dc_run_train.h"
#include "runtime.h"
#include "ir/clock.h"

namespace po = boost::program_options;

namespace dc {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;  // as `dc-coordinator verify`
constexpr double kMiB = 1024.0 * 1024.0;

struct RunOptions {
  std::string plan_dir;
  std::string data;
  int bench = 0;
  int warmup = 20;
  // --bench's warm-up also lasts at least this long; < 0: the device's default
  // (warmup_seconds_for).
  double warmup_seconds = -1;
  bool emulate = false;
  int device = 0;
  std::string cache_dir;
  // --data: the plan precision's whole-model tolerance (whole_model_tolerance) unless given.
  std::optional<double> rtol;
  std::optional<double> atol;
  uint32_t seed = 1;
  bool verbose = false;
  bool train = false;
  TrainRunOptions training;
};

constexpr const char* kUsage = R"(usage: dc-run PLAN_DIR [--data DIR] [--bench N] [--emulate] [options]

Runs an execution plan: the directory `dc-coordinator tune --out OUT` writes per GPU type
(OUT/<gpu>: plan.json, kernels.cu, weights.bin). Kernels are compiled with NVRTC for the
device (cached), weights uploaded once, and the launches replayed as a CUDA graph.

  (no --data)   one run on seeded random inputs; prints each output's shape and statistics
  --data DIR    compares every output with an ONNX test-data folder (input_N.pb,
                output_N.pb) as `dc-coordinator verify` does; exit 1 if one differs
  --bench N     times N runs after --warmup runs: latency median, p99, min and mean (GPU)
  --emulate     runs on the host emulator (CPU, correctness only, slow): checks a plan end
                to end on a machine without a GPU
  --train       a training plan (`plan|tune --train --out`): runs --steps training steps on
                the batch (--data DIR: input_N.pb in the plan's input order, the labels
                last; optional output_0.pb the last loss and output_K.pb named after state
                tensors, compared by their update as `verify --train` does), prints
                `step K loss X`; --save-weights OUT.onnx writes the trained model; --bench N
                times N whole steps (GPU)

example:
  dc-coordinator tune model.onnx --gpus h100 --out tuned/
  dc-run tuned/h100 --data test_data_set_0 --bench 200
  dc-coordinator tune model.onnx --gpus h100 --train --optimizer sgd --lr 0.1 --out trained/
  dc-run trained/h100 --train --data batch/ --steps 10 --save-weights model-trained.onnx

options)";

// Fresh seeded values, never zeros: floats uniform in [-1, 1), integers and bools 0 or 1
// (valid as indices into any non-empty dimension).
Tensor random_input(const PlanTensor& t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  Tensor out(t.dtype, t.shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float f = uniform(rng);
    const int64_t bit = rng() & 1u;
    switch (t.dtype) {
      case DType::f32: out.mutable_data<float>()[i] = f; break;
      case DType::f64: out.mutable_data<double>()[i] = f; break;
      case DType::f16: reinterpret_cast<uint16_t*>(out.raw_mutable())[i] = float_to_half(f); break;
      case DType::bf16: reinterpret_cast<uint16_t*>(out.raw_mutable())[i] = float_to_bf16(f); break;
      case DType::i64: out.mutable_data<int64_t>()[i] = bit; break;
      case DType::i32: out.mutable_data<int32_t>()[i] = static_cast<int32_t>(bit); break;
      case DType::boolean: out.mutable_data<bool>()[i] = bit != 0; break;
      default:
        throw_user_error("input '", t.name, "' has dtype ", dtype_name(t.dtype),
                         ": dc-run has no random values for it (give --data DIR)");
    }
  }
  return out;
}

std::string fmt_shape(const PlanTensor& t) {
  return fmt::format("{} {}", dtype_name(t.dtype), shape_str(t.shape));
}

void print_header(const rt::Runtime& r, const RunOptions& o) {
  const ExecPlan& p = r.plan();
  int64_t weight_bytes = 0;
  for (const auto& t : p.tensors)
    if (t.kind == PlanTensorKind::weight)
      weight_bytes += shape_numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype));
  std::cout << fmt::format("{:<9}{} ({})\n", "plan", o.plan_dir, p.model_name);
  std::cout << fmt::format("{:<9}{} ({}, {}), NVRTC {}, precision {}\n", "tuned", p.gpu_type,
                           p.gpu_name, p.gpu_arch, p.nvrtc_version.empty() ? "?" : p.nvrtc_version,
                           precision_name(p.precision));
  std::cout << fmt::format("{:<9}{} steps, {} modules, {} reference kernel(s); {:.1f} us {} "
                           "({:.1f} us estimated)\n", "steps", p.steps.size(), p.modules.size(),
                           p.reference_steps, p.measured_total_us,
                           p.emulated ? "emulated" : "measured", p.estimated_total_us);
  std::cout << fmt::format("{:<9}arena {:.2f} MiB (unshared {:.2f} MiB), weights {:.2f} MiB\n",
                           "memory", p.arena_bytes / kMiB, p.unshared_bytes / kMiB,
                           weight_bytes / kMiB);
  std::cout << fmt::format("{:<9}{}\n", "device", r.device_description());
  for (const auto& w : r.warnings()) std::cout << fmt::format("{:<9}{}\n", "warning", w);
}

std::vector<Tensor> bind_random_inputs(rt::Runtime& r, uint32_t seed) {
  std::vector<Tensor> bound;
  for (size_t i = 0; i < r.num_inputs(); ++i) {
    const PlanTensor& in = r.input_info(i);
    bound.push_back(random_input(in, seed + static_cast<uint32_t>(i)));
    r.set_input(i, bound.back());
    std::cout << fmt::format("{:<9}'{}' {}: random (seed {})\n", "input", in.name, fmt_shape(in),
                             seed + i);
  }
  return bound;
}

// Test-data inputs to plan inputs: by name when every plan input has a namesake in the
// data, else by position (the model-zoo convention, as verify does).
std::vector<Tensor> bind_data_inputs(rt::Runtime& r, const TestData& data) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& d : data.inputs) by_name[d.name] = &d.value;
  bool named = true;
  for (size_t i = 0; i < r.num_inputs(); ++i) named = named && by_name.count(r.input_info(i).name);
  if (!named)
    DC_USER_CHECK(data.inputs.size() == r.num_inputs(), "the plan has ", r.num_inputs(),
                  " input(s) but the test data has ", data.inputs.size(),
                  " input_N.pb file(s), not named after the plan's inputs");
  std::vector<Tensor> bound;
  for (size_t i = 0; i < r.num_inputs(); ++i) {
    const PlanTensor& in = r.input_info(i);
    bound.push_back(named ? *by_name.at(in.name) : data.inputs[i].value);
    r.set_input(i, bound.back());
    std::cout << fmt::format("{:<9}'{}' {}: from the test data\n", "input", in.name, fmt_shape(in));
  }
  return bound;
}

void run_once(rt::Runtime& r) {
  const auto t0 = std::chrono::steady_clock::now();
  r.run();
  std::cout << fmt::format("{:<9}{:.3f} s wall (one run, compile and upload excluded)\n", "run",
                           seconds_since(t0));
}

void print_output_stats(const rt::Runtime& r) {
  std::cout << fmt::format("\n  {:<24} {:<20} {:>8} {:>12} {:>12} {:>12}\n", "output", "shape",
                           "finite", "mean", "min", "max");
  for (size_t i = 0; i < r.num_outputs(); ++i) {
    const PlanTensor& info = r.output_info(i);
    const auto v = r.output(i).to_float_vector();
    size_t finite = 0;
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (float x : v) {
      if (!std::isfinite(x)) continue;
      ++finite;
      sum += x;
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
    }
    const std::string finite_text = finite == v.size() ? "all" : fmt::format("{}/{}", finite, v.size());
    std::cout << fmt::format("  {:<24} {:<20} {:>8} {:>12.4g} {:>12.4g} {:>12.4g}\n", info.name,
                             fmt_shape(info), finite_text, finite ? sum / finite : NAN,
                             finite ? lo : NAN, finite ? hi : NAN);
  }
}

// Indices of the k largest values of row `row` of a [rows, cols] float vector.
std::vector<int64_t> top_k(const std::vector<float>& v, int64_t row, int64_t cols, int64_t k) {
  std::vector<int64_t> idx(static_cast<size_t>(cols));
  std::iota(idx.begin(), idx.end(), 0);
  const float* p = v.data() + row * cols;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// A classifier (one output of shape [N, classes], classes >= 5): how often the plan's top-1
// class is the expected top-1, and how often the expected top-1 is among the plan's top 5.
void print_topk_agreement(const Tensor& out, const Tensor& want) {
  if (out.rank() != 2 || out.shape() != want.shape() || out.dim(1) < 5) return;
  const int64_t rows = out.dim(0), cols = out.dim(1);
  const auto got = out.to_float_vector(), ref = want.to_float_vector();
  int64_t top1 = 0, top5 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t expected = top_k(ref, r, cols, 1)[0];
    const auto mine = top_k(got, r, cols, 5);
    top1 += mine[0] == expected;
    top5 += std::find(mine.begin(), mine.end(), expected) != mine.end();
  }
  std::cout << fmt::format("  classifier: top-1 agreement {}/{} ({:.1f}%), expected class in "
                           "top-5 {}/{} ({:.1f}%)\n", top1, rows, 100.0 * top1 / rows, top5, rows,
                           100.0 * top5 / rows);
}

// Every test-data output against the plan's output at its position; true iff all pass.
bool compare_outputs(const rt::Runtime& r, const TestData& data, const RunOptions& o) {
  DC_USER_CHECK(data.outputs.size() <= r.num_outputs(), "the test data has ", data.outputs.size(),
                " output_N.pb file(s) but the plan only ", r.num_outputs(), " output(s)");
  const Precision precision = r.plan().precision;
  const Tolerance tol = whole_model_tolerance(precision);
  const double rtol = o.rtol.value_or(tol.rtol), atol = o.atol.value_or(tol.atol);
  std::cout << fmt::format("{:<9}{} plan against the test data at rtol {:g}, atol {:g}{}\n",
                           "check", precision_name(precision), rtol, atol,
                           o.rtol || o.atol ? " (given)" : " (docs/precision.md)");
  std::cout << fmt::format("\n  {:<24} {:<16} {:>12} {:>12}  {}\n", "output", "shape",
                           "max_abs_err", "rel_l2_err", "result");
  size_t passed = 0;
  for (size_t i = 0; i < data.outputs.size(); ++i) {
    const Tensor out = r.output(i);
    const auto c = ref::compare_tensors(out, data.outputs[i].value, rtol, atol);
    passed += c.pass;
    std::cout << fmt::format("  {:<24} {:<16} {:>12.3e} {:>12.3e}  {}{}\n", r.output_info(i).name,
                             shape_str(out.shape()), c.max_abs_error, c.rel_l2_error,
                             c.pass ? "PASS" : "FAIL", c.problem.empty() ? "" : " (" + c.problem + ")");
  }
  if (data.outputs.size() == 1 && r.num_outputs() == 1)
    print_topk_agreement(r.output(0), data.outputs[0].value);
  const bool ok = passed == data.outputs.size();
  std::cout << fmt::format("\ndc-run: {} ({}/{} outputs within rtol {:g}, atol {:g})\n",
                           ok ? "PASS" : "FAIL", passed, data.outputs.size(), rtol, atol);
  return ok;
}

// A CPU device (PoCL) settles only after about half a second of work (its clocks, caches and
// threads: tiny_cnn's median was 3.87 ms after 20 warm-up runs and 2.96 ms after 200,
// docs/bench/opencl.md); a GPU's warm-up runs are enough.
double warmup_seconds_for(const ExecPlan& plan) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec* spec = catalog.find(plan.gpu_type);
  return spec && spec->arch == "cpu" ? 0.5 : 0;
}

void bench(rt::Runtime& r, const RunOptions& o) {
  const double min_seconds = o.warmup_seconds >= 0 ? o.warmup_seconds : warmup_seconds_for(r.plan());
  const auto start = std::chrono::steady_clock::now();
  int extra = 0;  // runs beyond --warmup, to reach the minimum time
  if (min_seconds > 0) {
    r.time_runs(o.warmup, 1);
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < min_seconds) {
      r.time_runs(0, 1);
      ++extra;
    }
  }
  const double warm_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> us = r.time_runs(min_seconds > 0 ? 0 : o.warmup, o.bench);
  std::sort(us.begin(), us.end());
  const auto at = [&](double q) {
    const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(us.size())));
    return us[std::clamp<size_t>(k, 1, us.size()) - 1];
  };
  const double mean = std::accumulate(us.begin(), us.end(), 0.0) / static_cast<double>(us.size());
  std::cout << fmt::format("\nlatency  median {:.4f} ms, p99 {:.4f} ms, min {:.4f} ms, mean {:.4f} ms "
                           "({} runs after {} warm-up{})\n",
                           at(0.5) / 1000, at(0.99) / 1000, us.front() / 1000, mean / 1000,
                           us.size(), o.warmup + (min_seconds > 0 ? 1 + extra : 0),
                           min_seconds > 0 ? fmt::format(" in {:.2f} s, at least {:g} s", warm_s, min_seconds) : "");
  const double plan_us = r.plan().measured_total_us;
  if (plan_us > 0 && !r.plan().emulated)
    std::cout << fmt::format("         the plan's kernels summed to {:.4f} ms when tuned\n",
                             plan_us / 1000);
}

std::optional<RunOptions> parse(int argc, char** argv) {
  RunOptions o;
  po::options_description desc(kUsage);
  desc.add_options()
      ("help,h", "this text")
      ("data", po::value(&o.data)->value_name("DIR"), "ONNX test-data folder to compare with")
      ("bench", po::value(&o.bench)->value_name("N"), "time N runs (GPU only)")
      ("warmup", po::value(&o.warmup)->value_name("N")->default_value(o.warmup),
       "untimed runs before --bench")
      ("warmup-seconds", po::value(&o.warmup_seconds)->value_name("S"),
       "--bench: warm up for at least S seconds as well (default 0.5 on a CPU device such as "
       "PoCL's, which settles only after about half a second of work; 0 on a GPU)")
      ("emulate", po::bool_switch(&o.emulate), "run on the host emulator (no GPU needed)")
      ("device", po::value(&o.device)->value_name("N")->default_value(o.device), "CUDA device ordinal")
      ("cache-dir", po::value(&o.cache_dir)->value_name("DIR"),
       "kernel compile cache (default under ~/.cache/dc)")
      ("rtol", po::value<double>()->value_name("R"), "relative L2 tolerance (--data; default: "
       "the plan's precision's whole-model tolerance, fp32 1e-4, docs/precision.md)")
      ("atol", po::value<double>()->value_name("A"), "absolute (RMS) tolerance (--data; "
       "default likewise, fp32 1e-6)")
      ("seed", po::value(&o.seed)->value_name("S")->default_value(o.seed), "seed of the random inputs")
      ("train", po::bool_switch(&o.train), "run training steps of a training plan")
      ("steps", po::value(&o.training.steps)->value_name("N")->default_value(o.training.steps),
       "--train: steps to run on the batch")
      ("save-weights", po::value(&o.training.save_weights)->value_name("OUT.onnx"),
       "--train: write the source model with its initializers replaced by the trained values")
      ("model", po::value(&o.training.model)->value_name("MODEL.onnx"),
       "--train --save-weights: the source model, if not where the plan says it is")
      ("verbose,v", po::bool_switch(&o.verbose), "log what loading does (compiles, uploads)");
  po::options_description hidden;
  hidden.add_options()("plan", po::value(&o.plan_dir));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("plan", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return std::nullopt;
  }
  po::notify(vm);
  if (vm.count("rtol")) o.rtol = vm["rtol"].as<double>();
  if (vm.count("atol")) o.atol = vm["atol"].as<double>();
  DC_USER_CHECK(o.train || (vm["steps"].defaulted() && o.training.save_weights.empty() && o.training.model.empty()),
                "--steps, --save-weights and --model need --train");
  DC_USER_CHECK(o.training.steps >= 1, "--steps must be >= 1");
  o.training.rtol = o.rtol.value_or(o.training.rtol);
  o.training.atol = o.atol.value_or(o.training.atol);
  o.training.bench = o.bench;
  o.training.warmup = vm["warmup"].defaulted() ? o.training.warmup : o.warmup;
  DC_USER_CHECK(!o.plan_dir.empty(), "dc-run needs a plan directory: dc-run PLAN_DIR (see --help)");
  DC_USER_CHECK(!(o.emulate && vm.count("bench")),
                "--bench needs a GPU: the host emulator has no timing (drop --emulate)");
  DC_USER_CHECK(!vm.count("bench") || o.bench >= 1, "--bench N needs N >= 1");
  DC_USER_CHECK(o.warmup >= 0, "--warmup must be non-negative");
  DC_USER_CHECK(!vm.count("warmup-seconds") || (o.warmup_seconds >= 0 && o.warmup_seconds <= 600),
                "--warmup-seconds must be 0 to 600");
  DC_USER_CHECK(o.device >= 0, "--device must be a CUDA device ordinal (0, 1, ...)");
  DC_USER_CHECK(o.rtol.value_or(0) >= 0 && o.atol.value_or(0) >= 0,
                "--rtol and --atol must be non-negative");
  return o;
}

// The plan on its device. A device that cannot run it (no driver, no GPU) gets a pointer to
// --emulate; a bad plan directory does not.
rt::Runtime open_runtime(const RunOptions& o, const rt::RuntimeOptions& ro) {
  WeightsFile weights;  // checksummed as the backend uploads it: weights.bin read once
  ExecPlan plan = read_plan(o.plan_dir, &weights);
  rt::RuntimeOptions options = ro;
  if (plan.gpu_arch == "spir64") options.opencl = true;  // a plan for an OpenCL type (docs/opencl.md)
  try {
    return rt::Runtime(std::move(plan), options, &weights);
  } catch (const UserError& e) {
    if (o.emulate || options.opencl) throw;
    throw UserError(fmt::format("{}; without a GPU, --emulate runs the plan on the host emulator",
                                e.what()));
  }
}

int run(int argc, char** argv) {
  const auto parsed = parse(argc, argv);
  if (!parsed) return kExitOk;
  const RunOptions& o = *parsed;
  init_logging(o.verbose ? "info" : "warn");

  rt::RuntimeOptions ro;
  ro.emulate = o.emulate;
  ro.device = o.device;
  ro.cache_dir = o.cache_dir;
  const auto t0 = std::chrono::steady_clock::now();
  rt::Runtime r = open_runtime(o, ro);
  print_header(r, o);
  std::cout << fmt::format("{:<9}{:.3f} s (read, compile, upload)\n", "load", seconds_since(t0));

  if (o.train) {
    std::optional<TestData> data;
    if (!o.data.empty()) data = read_test_data(o.data);
    const std::vector<Tensor> inputs = data ? bind_data_inputs(r, *data) : bind_random_inputs(r, o.seed);
    return run_training(r, inputs, data ? &*data : nullptr, o.training);
  }
  bool ok = true;
  if (!o.data.empty()) {
    const TestData data = read_test_data(o.data);
    bind_data_inputs(r, data);
    run_once(r);
    ok = compare_outputs(r, data, o);
  } else {
    bind_random_inputs(r, o.seed);
    run_once(r);
    print_output_stats(r);
  }
  if (o.bench > 0) bench(r, o);
  return ok ? kExitOk : kExitCheckFailed;
}

}  // namespace
}  // namespace dc

int main(int argc, char** argv) {
  return dc::run_guarded([&] { return dc::run(argc, argv); });
}
