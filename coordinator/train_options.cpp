#include "train_options.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "ir/clock.h"
#include "ir/error.h"
#include "ir/optimizer_update.h"
#include "ir/precision.h"
#include "passes/apply_precision.h"
#include "passes/build_training_graph.h"
#include "passes/simplify_for_training.h"
#include "passes/training/mixed_precision.h"
#include "train_recompute.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kTrainingFlags[] = {"loss", "labels", "optimizer", "lr", "momentum",
                                          "weight-decay", "betas", "eps", "freeze", "no-recompute",
                                          "optimizer-bucket-mib", "train-attention"};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    out.push_back(s.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

double parse_number(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw_user_error("--", flag, " '", text, "' is not a number");
}

}  // namespace

void add_training_options(po::options_description& desc) {
  desc.add_options()
      ("train", "build the training step (forward, loss, gradients, optimizer update) instead "
       "of inference (docs/training.md)")
      ("loss", po::value<std::string>(), "with --train: cross_entropy (default: first output = "
       "logits over the last axis, int64 labels), mse (float target of the first output's "
       "shape) or none (the first output is the loss)")
      ("labels", po::value<std::string>(), "with --train: the labels input's name (default labels)")
      ("optimizer", po::value<std::string>(), "with --train: sgd (default) or adamw")
      ("lr", po::value<std::string>(), "with --train: learning rate (default 0.01 for sgd, "
       "0.001 for adamw)")
      ("momentum", po::value<std::string>(), "with --train --optimizer sgd: momentum (default 0)")
      ("weight-decay", po::value<std::string>(), "with --train: weight decay (default 0 for sgd, "
       "0.01 for adamw, decoupled)")
      ("betas", po::value<std::string>(), "with --train --optimizer adamw: B1,B2 (default 0.9,0.999)")
      ("eps", po::value<std::string>(), "with --train --optimizer adamw: epsilon (default 1e-8)")
      ("freeze", po::value<std::vector<std::string>>()->composing(), "with --train: NAME,... "
       "initializers that are not trained (repeatable)")
      ("no-recompute", "with --train: keep every forward activation the backward pass reads, "
       "never compute a cheap elementwise chain again to lower the peak memory")
      ("optimizer-bucket-mib", po::value<std::string>(), "with --train: MiB of weights one fused "
       "multi-tensor optimizer kernel updates at most (default 16; 0: one kernel per weight). "
       "A bucket's gradients live until its last one is done")
      ("train-attention", po::value<std::string>(), "with --train: fused (one FlashAttention-2 "
       "style kernel pair per attention, no S x S tensor kept), ops (op by op, as the model "
       "has it) or auto (default: the step with the lower estimate on the first --gpus type)");
}

std::optional<TrainingSpec> read_training_options(const po::variables_map& vm) {
  if (!vm.count("train")) {
    for (const char* f : kTrainingFlags)
      DC_USER_CHECK(!vm.count(f), "--", f, " is a training option: add --train");
    return std::nullopt;
  }
  TrainingSpec s;
  auto text = [&](const char* f) { return vm[f].as<std::string>(); };
  if (vm.count("loss")) s.loss = parse_loss(text("loss"));
  if (vm.count("labels")) s.labels = text("labels");
  if (vm.count("optimizer")) s.optimizer = parse_optimizer(text("optimizer"));
  const bool adamw = s.optimizer == OptimizerKind::adamw;
  s.lr = vm.count("lr") ? parse_number("lr", text("lr")) : (adamw ? 1e-3 : 1e-2);
  s.weight_decay = vm.count("weight-decay") ? parse_number("weight-decay", text("weight-decay"))
                                            : (adamw ? 1e-2 : 0.0);
  DC_USER_CHECK(!vm.count("momentum") || !adamw, "--momentum is an sgd option; adamw takes --betas");
  DC_USER_CHECK(adamw || (!vm.count("betas") && !vm.count("eps")),
                "--betas and --eps are adamw options (add --optimizer adamw)");
  if (vm.count("momentum")) s.momentum = parse_number("momentum", text("momentum"));
  if (vm.count("betas")) {
    const auto b = split_commas(text("betas"));
    DC_USER_CHECK(b.size() == 2, "--betas '", text("betas"), "' must be two numbers B1,B2");
    s.beta1 = parse_number("betas", b[0]);
    s.beta2 = parse_number("betas", b[1]);
  }
  if (vm.count("eps")) s.eps = parse_number("eps", text("eps"));
  if (vm.count("freeze"))
    for (const auto& list : vm["freeze"].as<std::vector<std::string>>())
      for (const auto& name : split_commas(list)) {
        DC_USER_CHECK(!name.empty(), "--freeze '", list, "' has an empty name");
        s.freeze.insert(name);
      }
  s.recompute = !vm.count("no-recompute");
  if (vm.count("optimizer-bucket-mib")) {
    const double mib = parse_number("optimizer-bucket-mib", text("optimizer-bucket-mib"));
    DC_USER_CHECK(mib >= 0 && mib <= 1 << 20, "--optimizer-bucket-mib ", text("optimizer-bucket-mib"),
                  " is outside [0, 1048576]");
    s.optimizer_bucket_bytes = static_cast<int64_t>(mib * (1 << 20));
  }
  if (vm.count("train-attention")) {
    const std::string a = text("train-attention");
    DC_USER_CHECK(a == "auto" || a == "fused" || a == "ops", "--train-attention '", a,
                  "' is not one of auto, fused, ops");
    s.attention = a == "fused" ? AttentionFusion::fused : a == "ops" ? AttentionFusion::ops : AttentionFusion::automatic;
  }
  DC_USER_CHECK(s.loss != LossKind::none || !vm.count("labels"), "--labels has no meaning with "
                "--loss none");
  validate(s);
  return s;
}

namespace {

bool has_fused_attention(const Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == "dc.Attention"; });
}

}  // namespace

LoadedModel load_training_model(OnnxModel model, const ImportOptions& opts, const TrainingSpec& spec,
                                Precision precision, const StepEstimate& estimate) {
  LoadedModel out;
  auto t0 = std::chrono::steady_clock::now();
  out.imported = import_onnx(std::move(model), opts);
  out.import_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  // The model's own weights train; constants that simplification folds into new
  // initializers (torch's Constant nodes) do not.
  TrainingSpec with_weights = spec;
  with_weights.mixed_precision = storage_dtype(precision);  // f32 for fp32 and tf32
  with_weights.parameters.emplace();
  for (const auto& [name, t] : out.imported.initializers)
    if (is_float(t.dtype()) && t.rank() >= 1) with_weights.parameters->insert(name);
  const Graph simplified = simplify_for_training(out.imported);
  out.simplified = build_training_graph(simplified, with_weights);
  out.simplify_seconds = seconds_since(t0);
  spdlog::info("training graph of {} nodes ({} imported) in {:.3f} s", out.simplified.nodes.size(),
               out.imported.nodes.size(), out.simplify_seconds);
  const auto finish = [&](Graph g, std::vector<std::string>* precision_notes, std::string* recompute) {
    g = apply_precision(std::move(g), precision, precision_notes);
    *recompute = spec.recompute ? describe_recompute(recompute_cheap_chains(g)) : "recompute: off (--no-recompute)";
    return g;
  };
  std::string recompute;
  out.simplified = finish(std::move(out.simplified), &out.precision_notes, &recompute);
  out.training_notes = {training_plan_note(out.simplified), recompute};
  // --train-attention auto: the fused attention's backward runs on CUDA cores, where the
  // op-by-op GEMMs may be faster (BERT-base at batch 32); keep the step the estimator prefers.
  if (spec.attention == AttentionFusion::automatic && estimate && has_fused_attention(out.simplified)) {
    TrainingSpec ops = with_weights;
    ops.attention = AttentionFusion::ops;
    std::vector<std::string> ops_precision_notes;
    std::string ops_recompute;
    Graph by_ops = finish(build_training_graph(simplified, ops), &ops_precision_notes, &ops_recompute);
    const auto [gpu, fused_s] = estimate(out.simplified);
    const double ops_s = estimate(by_ops).second;
    const bool keep_fused = fused_s <= ops_s;
    const std::string note = fmt::format(
        "attention: {} by estimate (--train-attention auto): {} step {:.1f} us fused, {:.1f} us op by op",
        keep_fused ? "fused" : "op by op", gpu, fused_s * 1e6, ops_s * 1e6);
    spdlog::info("{}", note);
    if (!keep_fused) {
      out.simplified = std::move(by_ops);
      out.precision_notes = std::move(ops_precision_notes);
      out.training_notes = {training_plan_note(out.simplified), ops_recompute};
    }
    out.training_notes.push_back(note);
  }
  return out;
}

StepEstimate step_estimate(const GpuSpec* gpu, const PlanOptions& opts) {
  return [gpu, opts](const Graph& g) {
    const ModelPlan plan = plan_by_estimate(g, {gpu}, opts);
    return std::pair<std::string, double>{gpu->name, plan.gpus.at(0).cover.total_cost};
  };
}

std::string training_plan_note(const Graph& g) {
  std::map<std::string, int64_t> internal;
  for (const auto& [op, count] : g.op_counts())
    if (op.starts_with("dc.")) internal[op] = count;
  size_t updated = 0;
  for (const Node& n : g.nodes)
    if (is_optimizer_update(n.op)) updated += optimizer_update_layout(n).tensors;
  std::string ops;
  for (const auto& [op, count] : internal)
    ops += fmt::format("{}{} x{}{}", ops.empty() ? "" : ", ", op, count,
                       is_optimizer_update(op) ? fmt::format(" ({} tensors)", updated) : "");
  return fmt::format("training step of {} nodes; {} training op(s), each its naive kernel "
                     "(opaque_generic, one thread per output element; an optimizer update one fused "
                     "multi-tensor kernel per bucket; dc.Attention and dc.AttentionGrad the attention "
                     "templates attention_fused and attention_backward; dc.ConvGradWeight "
                     "conv_implicit_gemm's weight-gradient mode): {}", g.nodes.size(), internal.size(),
                     ops.empty() ? "none" : ops);
}

PlanTraining plan_training(const TrainingSpec& spec, const std::string& model_path, Precision precision) {
  PlanTraining t;
  t.loss = std::string(loss_name(spec.loss));
  t.labels = spec.loss == LossKind::none ? "" : spec.labels;
  t.optimizer = std::string(optimizer_name(spec.optimizer));
  t.hyperparameters = {{"lr", spec.lr}, {"weight_decay", spec.weight_decay}};
  if (spec.optimizer == OptimizerKind::sgd) {
    t.hyperparameters.emplace_back("momentum", spec.momentum);
  } else {
    t.hyperparameters.emplace_back("beta1", spec.beta1);
    t.hyperparameters.emplace_back("beta2", spec.beta2);
    t.hyperparameters.emplace_back("eps", spec.eps);
  }
  t.source_model = std::filesystem::absolute(model_path).lexically_normal().string();
  const DType mixed = storage_dtype(precision);
  if (mixed == DType::f32) return t;
  PlanMixedPrecision& m = t.mixed_precision.emplace();
  m.dtype = std::string(dtype_name(mixed));
  if (mixed != DType::f16) return t;
  m.loss_scale = std::string(kLossScale);
  m.growth_tracker = std::string(kLossScaleGrowth);
  m.init_scale = spec.loss_scale_init;
  m.growth_interval = spec.loss_scale_growth_interval;
  return t;
}

}  // namespace dc::cli
