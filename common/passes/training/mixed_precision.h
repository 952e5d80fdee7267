// Mixed-precision training steps, as PyTorch's AMP (docs/training.md, "Mixed precision").
//
// build_training_graph calls these for TrainingSpec::mixed_precision f16/bf16, and
// apply_precision then stores the step's tensors: GEMM operands and activations (forward and
// backward) in the reduced type, while weights (the master copies), the gradients reaching
// the optimizer, optimizer state and the loss-scaling bookkeeping stay f32
// (training_fp32_tensors). For f16 the loss is scaled dynamically, GradScaler's rules: the
// backward pass is seeded with the scale S instead of 1, the optimizer updates multiply
// each gradient by 1/S themselves, and a step with an inf/NaN gradient (one multi-tensor
// check) leaves every weight and optimizer state as it was and halves S; after `growth_interval` finite steps in a row S doubles.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "passes/training_spec.h"

namespace dc {

// Node-name prefix of the f32 bookkeeping: unscaling, the overflow check, the update gates
// and the loss scale's update.
inline constexpr std::string_view kAmpPrefix = "amp/";
// The state of f16's dynamic loss scaling: the scale S (shaped as the loss) and the count of
// finite steps since it last changed (f32, shape []).
inline constexpr std::string_view kLossScale = "train.loss_scale";
inline constexpr std::string_view kLossScaleGrowth = "train.loss_scale_growth";
// Suffix of a weight's reduced-precision copy (WEIGHT@compute, made each step by a Cast, then
// by its dc.MultiCast).
inline constexpr std::string_view kComputeSuffix = "@compute";

// Each weight in `weights` (trained or frozen) that a Conv, ConvTranspose, Gemm or MatMul reads (directly or
// through Reshape/Transpose/Flatten/Squeeze/Unsqueeze) gets a Cast to WEIGHT@compute, which
// all its consumers read instead: the GEMM operand is rounded to the reduced type once per
// step, as autocast does. Each Cast sits just before its first reader, so the gradient pass
// puts its gradient's Cast back to f32 beside the weight gradient: the plan's cover (a search
// in node order) then meets no candidate that spans the whole backward pass. Other weights (normalisation parameters,
// embedding tables, biases added on their own) are read as f32.
void cast_weights_for_compute(Graph& g, const std::set<std::string>& weights);

// After the gradient pass (which has put each Cast's gradient beside its weight gradient):
// cast_weights_for_compute's Casts become dc.MultiCast nodes (ir/multi_cast.h), one kernel
// for kMultiCastMaxInputs weights in place of a launch each, the weights in the Casts' order,
// each node where its first Cast was (so before every reader of its copies, and before every
// optimizer update, which writes the weights in place at the end of the step).
void merge_compute_casts(Graph& g);

// Adds the loss-scale state (spec.loss_scale_init, shaped as `loss`) and its growth counter;
// returns the scale, the backward pass's seed.
std::string add_loss_scale(Graph& g, const std::string& loss, const TrainingSpec& spec);

// The overflow check: dc.NonFiniteCheck over the gradients (ir/nonfinite_check.h, one node per
// kNonFiniteCheckMaxInputs of them), the count of lanes that saw an inf or NaN, and its
// test against 0; returns that bool scalar (true: every gradient is finite).
std::string check_gradients_finite(Graph& g, const std::map<std::string, std::string>& gradients);

// After add_optimizer: every update node reads the scaled gradients and the loss scale
// (scaled = 1: G / S in its kernel) and all_finite (gated = 1: a skipped step writes
// each STATE@next as STATE, in the update's own kernel) and moves to the end of the step,
// after the last gradient; the step counter's next value becomes Where(all_finite, its
// increment, STATE); and the loss scale and its counter get their next values (GradScaler's
// update).
void gate_updates_on_overflow(Graph& g, const std::string& all_finite, const TrainingSpec& spec);

// The tensors of a training graph that stay f32 under fp16/bf16 (apply_precision): its state
// (weights, optimizer state, running statistics, loss scale) and every other f32 initializer
// of rank >= 1 (frozen weights are master copies too), every float input and output
// of the optimizer's and the bookkeeping's nodes (so the gradients reaching the optimizer),
// and the statistics a normalisation saves for its backward pass (BatchNorm's batch mean and
// inverse std, the softmax cross-entropy's log-probabilities, the fused attention's log-sum-exp).
std::set<std::string> training_fp32_tensors(const Graph& g);

}  // namespace dc
