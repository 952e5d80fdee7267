#include "passes/training_spec.h"

#include <cmath>

#include "ir/error.h"

namespace dc {

std::string_view loss_name(LossKind k) {
  switch (k) {
    case LossKind::cross_entropy: return "cross_entropy";
    case LossKind::mse: return "mse";
    case LossKind::none: return "none";
  }
  return "?";
}

std::string_view optimizer_name(OptimizerKind k) {
  return k == OptimizerKind::sgd ? "sgd" : "adamw";
}

LossKind parse_loss(std::string_view s) {
  for (LossKind k : {LossKind::cross_entropy, LossKind::mse, LossKind::none})
    if (s == loss_name(k)) return k;
  throw_user_error("--loss '", s, "' is not one of cross_entropy, mse, none");
}

OptimizerKind parse_optimizer(std::string_view s) {
  for (OptimizerKind k : {OptimizerKind::sgd, OptimizerKind::adamw})
    if (s == optimizer_name(k)) return k;
  throw_user_error("--optimizer '", s, "' is not one of sgd, adamw");
}

void validate(const TrainingSpec& s) {
  auto finite = [](double v) { return std::isfinite(v); };
  DC_USER_CHECK(finite(s.lr) && s.lr > 0, "--lr must be > 0, got ", s.lr);
  DC_USER_CHECK(finite(s.momentum) && s.momentum >= 0 && s.momentum < 1,
                "--momentum must be in [0, 1), got ", s.momentum);
  DC_USER_CHECK(finite(s.weight_decay) && s.weight_decay >= 0,
                "--weight-decay must be >= 0, got ", s.weight_decay);
  DC_USER_CHECK(finite(s.beta1) && s.beta1 >= 0 && s.beta1 < 1 && finite(s.beta2) &&
                    s.beta2 >= 0 && s.beta2 < 1,
                "--betas must both be in [0, 1), got ", s.beta1, ",", s.beta2);
  DC_USER_CHECK(finite(s.eps) && s.eps > 0, "--eps must be > 0, got ", s.eps);
  DC_USER_CHECK(!s.labels.empty() || s.loss == LossKind::none, "--labels must not be empty");
  DC_USER_CHECK(s.mixed_precision == DType::f32 || s.mixed_precision == DType::f16 ||
                    s.mixed_precision == DType::bf16,
                "mixed-precision training stores f16 or bf16, not ", dtype_name(s.mixed_precision));
  DC_USER_CHECK(finite(s.loss_scale_init) && s.loss_scale_init > 0 && s.loss_scale_growth_interval >= 1,
                "the loss scale must be > 0 and its growth interval >= 1");
}

}  // namespace dc
