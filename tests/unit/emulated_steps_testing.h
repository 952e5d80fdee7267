// Training steps of a plan on the host emulator against the CPU reference's steps of its
// graph: the check the training-plan tests share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "passes/training_state.h"
#include "ref/compare.h"
#include "ref/train_step.h"
#include "runtime.h"
#include "testing.h"

namespace dc::testing {

// Three steps of runtime `r` (built from `g`'s plan; it carries the state) and of the CPU
// reference on `g`, on one batch: the input random from `seed`, labels (mul * i + add) % 10.
// Each step's loss within 1e-5 relative; each f32 state's change over the three steps within
// verify --train's bound (rel. L2 1e-3). `g`'s initializers end at the reference's third
// step. Returns how many states were compared (a state not carried, or carried into the
// wrong weight, changes the second and third losses and the updates).
inline int expect_emulator_steps_follow_reference(rt::Runtime& r, Graph& g, uint32_t seed, int64_t label_mul,
                                                  int64_t label_add) {
  const Tensor x = random_tensor(r.input_info(0).shape, seed);
  Tensor labels(DType::i64, r.input_info(1).shape);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.mutable_data<int64_t>()[i] = (label_mul * i + label_add) % 10;
  r.set_input(0, x);
  r.set_input(1, labels);
  const ref::TensorMap inputs = {{g.inputs[0], x}, {g.inputs[1], labels}};
  const std::map<std::string, Tensor> before = g.initializers;
  for (int k = 0; k < 3; ++k) {
    r.train_step();
    const ref::TensorMap want = ref::run_training_step(g, inputs);
    const double loss = r.output(0).to_float_vector()[0], ref_loss = ref::loss_value(g, want);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss)) << "step " << k + 1;
  }
  int compared = 0;
  for (const StateUpdate& u : training_state_updates(g)) {
    const Tensor& old = before.at(u.state);
    if (old.dtype() != DType::f32) continue;
    const auto got = r.weight(u.state).to_float_vector(), want = g.initializers.at(u.state).to_float_vector();
    const auto o = old.to_float_vector();
    Tensor dg(DType::f32, old.shape()), dw(DType::f32, old.shape());
    for (size_t i = 0; i < o.size(); ++i) {
      dg.mutable_data<float>()[i] = got[i] - o[i];
      dw.mutable_data<float>()[i] = want[i] - o[i];
    }
    const ref::Comparison c = ref::compare_tensors(dg, dw, 1e-3, 1e-7);  // verify --train's bound
    EXPECT_TRUE(c.pass) << u.state << ": update rel L2 " << c.rel_l2_error << " " << c.problem;
    ++compared;
  }
  return compared;
}

}  // namespace dc::testing
