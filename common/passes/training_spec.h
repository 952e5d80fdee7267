// What a training step computes: the loss, the optimizer and its hyper-parameters, and
// which weights stay frozen (the `--train` options of dc-coordinator, docs/training.md).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "ir/dtype.h"

namespace dc {

enum class LossKind {
  cross_entropy,  // first output = logits over the last axis; int64 class labels
  mse,            // float target of the first output's shape
  none,           // the first output already is the scalar loss
};

enum class OptimizerKind { sgd, adamw };

// Whether the step's attention runs as one dc.Attention / dc.AttentionGrad pair
// (fuse_training_attention: FlashAttention-2 style, no S x S tensor kept) or op by op.
// `automatic` fuses in build_training_graph; the coordinator resolves it by estimate
// (`--train-attention`, coordinator/train_options.h).
enum class AttentionFusion { automatic, fused, ops };

struct TrainingSpec {
  LossKind loss = LossKind::cross_entropy;
  std::string labels = "labels";  // the labels (or mse target) input's name
  OptimizerKind optimizer = OptimizerKind::sgd;
  // PyTorch's defaults where it has them (AdamW: lr 1e-3, weight decay 1e-2; SGD: 0).
  double lr = 0.01;
  double momentum = 0.0;  // SGD
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  // Initializers that get no gradient and no update.
  std::set<std::string> freeze;
  // The initializers that are parameters. Unset: every float initializer of rank >= 1 that
  // is read where it could get a gradient (docs/training.md, "Which weights train").
  std::optional<std::set<std::string>> parameters;
  // Recompute cheap elementwise chains in the backward pass when that lowers the step's
  // peak memory (--no-recompute: off). Read by the coordinator (coordinator/train_recompute.h).
  bool recompute = true;
  // The weights one optimizer update node (one multi-tensor kernel) updates at most; a
  // bucket's gradients live until its last one is done (docs/training.md, "Optimizers").
  // 0: one node per tensor.
  int64_t optimizer_bucket_bytes = int64_t{16} << 20;
  // Mixed precision (AMP, `--precision fp16|bf16`; docs/training.md "Mixed precision"): the
  // dtype that GEMM operands and activations are stored in; f32 = off. Weights, gradients
  // reaching the optimizer and optimizer state stay f32.
  DType mixed_precision = DType::f32;
  // f16's dynamic loss scaling, PyTorch's GradScaler defaults (growth x2, backoff x0.5).
  // No flag sets them: tests shorten the growth interval or plant a huge scale.
  double loss_scale_init = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
  AttentionFusion attention = AttentionFusion::automatic;
};

std::string_view loss_name(LossKind k);
std::string_view optimizer_name(OptimizerKind k);
// UserError listing the accepted names.
LossKind parse_loss(std::string_view s);
OptimizerKind parse_optimizer(std::string_view s);
// UserError for hyper-parameters outside their range (lr <= 0, betas outside [0, 1), ...).
void validate(const TrainingSpec& spec);

}  // namespace dc
