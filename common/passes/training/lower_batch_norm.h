// BatchNorm's normalisation as elementwise ops, once its gradient is built.
#pragma once

#include <string>

#include "ir/graph.h"

namespace dc {

// Name prefix of the nodes and intermediates of BatchNorm `name`'s chain (a forward
// quantity: recompute and the plan's notes tell it from the backward pass's "grad/").
inline std::string batch_norm_apply_prefix(const std::string& name) { return name + "/apply/"; }

// Name prefix of the nodes and intermediates computing BatchNorm `name`'s per-channel
// outputs (running statistics' update, inverse std), and the name of the node writing its
// inverse std: how training_fp32_tensors finds a lowered BatchNorm.
inline std::string batch_norm_stats_prefix(const std::string& name) { return name + "/stats/"; }
inline std::string batch_norm_invstd_node(const std::string& name) { return batch_norm_stats_prefix(name) + "invstd"; }

// Every dc.BatchNormTrain becomes elementwise ops: its per-channel outputs over [C] (the
// running statistics' update and the inverse std, as channel_stats in ops_training.cpp; the
// saved mean is the batch mean itself), which the candidate generator fuses into the batch
// statistics' ReduceMeans as row-space outputs, and Y the chain ((X - mean) * invstd) *
// scale + B over [C, 1, ...] views of the per-channel operands. The candidate generator
// fuses that chain with the ReLU or the residual Add that reads Y: one pass over the
// activations instead of two, and no kernel that reads X only to write Y. Run after the
// gradients: BatchNorm's rule (grad_training_ops.cpp) reads the saved statistics, X and
// scale, never Y. Under AMP training_fp32_tensors keeps the statistics and the chain's
// intermediates f32, so only Y is stored in the reduced type.
void lower_batch_norm_apply(Graph& g);

}  // namespace dc
