#include "passes/build_training_graph.h"

#include <spdlog/spdlog.h>

#include "ir/error.h"
#include "passes/training/add_gradients.h"
#include "passes/training/add_loss.h"
#include "passes/training/add_optimizer.h"
#include "passes/training/fuse_training_attention.h"
#include "passes/training/lower_batch_norm.h"
#include "passes/training/lower_cross_entropy.h"
#include "passes/training/mixed_precision.h"
#include "passes/training/trainable_weights.h"
#include "passes/training/training_forward.h"
#include "passes/training_state.h"

namespace dc {

namespace {

// Loss first, then the model's outputs, then every STATE@next in the order it was added.
std::vector<std::string> step_outputs(const Graph& g, const std::string& loss,
                                      const std::vector<std::string>& model_outputs) {
  std::vector<std::string> out{loss};
  for (const auto& o : model_outputs)
    if (o != loss) out.push_back(o);
  for (const auto& o : g.outputs)
    if (o.ends_with(kNextSuffix)) out.push_back(o);
  return out;
}

}  // namespace

Graph build_training_graph(Graph g, const TrainingSpec& spec) {
  validate(spec);
  DC_USER_CHECK(!is_training_graph(g), "the graph already is a training graph");
  const std::vector<std::string> model_outputs = g.outputs;
  const std::set<std::string> weights = trainable_weights(g, spec);
  g = use_training_forward(std::move(g));
  const bool mixed = spec.mixed_precision != DType::f32;
  if (mixed) {  // frozen weights are f32 masters too, cast at their GEMM uses (as autocast)
    std::set<std::string> masters = weights;
    for (const auto& f : spec.freeze)
      if (g.is_constant(f)) masters.insert(f);
    cast_weights_for_compute(g, masters);
  }
  // Before the loss, so dc.Attention gets its rule. Under AMP the precision pass stores its
  // operands in the reduced type and keeps its log-sum-exp f32 (training_fp32_tensors).
  if (spec.attention != AttentionFusion::ops) fuse_training_attention(g, weights);
  const std::string loss = add_loss(g, spec);
  const bool scaled = spec.mixed_precision == DType::f16;
  const std::string scale = scaled ? add_loss_scale(g, loss, spec) : "";
  const auto gradients = scaled ? add_vector_jacobian_product(g, {{loss, scale}}, weights)
                                : add_gradients(g, loss, weights);
  DC_USER_CHECK(!gradients.empty(), "no trainable weight reaches the loss (", weights.size(),
                " candidate(s), ", spec.freeze.size(), " frozen)");
  lower_cross_entropy(g);  // its gradient is built: the loss itself on the templates
  // Under AMP the chain computes in f32 and only Y is stored reduced (training_fp32_tensors).
  lower_batch_norm_apply(g);
  if (mixed) merge_compute_casts(g);  // the weights' Casts as one kernel, their gradients' Casts built
  add_optimizer(g, spec, gradients);  // under fp16 on the scaled gradients: G / S in the update
  if (scaled) gate_updates_on_overflow(g, check_gradients_finite(g, gradients), spec);
  g.outputs = step_outputs(g, loss, model_outputs);
  spdlog::info("training graph: {} nodes, {} trained weights, loss {}, optimizer {}{}",
               g.nodes.size(), gradients.size(), loss_name(spec.loss), optimizer_name(spec.optimizer),
               mixed ? std::string(", mixed precision ") + std::string(dtype_name(spec.mixed_precision)) : "");
  return g;
}

}  // namespace dc
