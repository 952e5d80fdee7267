// Small helpers shared by dc's GoogleTest suites.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace dc::testing {

#ifdef DC_SOURCE_DIR
// The repository root: $DC_SOURCE_DIR when set (a test binary carried to another machine,
// e.g. in scripts/make_dist.sh --with-tests), else the tree it was built from.
inline std::string source_dir() {
  const char* env = std::getenv("DC_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(DC_SOURCE_DIR);
}
#endif

// The message of the UserError that `f` throws; a test failure (and "") if it throws none.
template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError";
  return "";
}

// A node with the given op, inputs, outputs and attributes; named after its first output.
inline Node make_node(std::string op, std::vector<std::string> inputs,
                      std::vector<std::string> outputs, Attributes attrs = {}) {
  Node n;
  n.name = outputs.empty() ? op : op + ":" + outputs[0];
  n.op = std::move(op);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

// f32 tensor with values uniform in [lo, hi) from a fixed seed: fresh random inputs,
// never zeros, reproducible across runs.
inline Tensor random_tensor(const Shape& shape, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::f32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// Asserts equal dtype and shape, and |a-b| <= atol + rtol*|b| elementwise (floats), exact
// equality otherwise.
inline void expect_tensor_near(const Tensor& actual, const Tensor& expected, float atol = 1e-5f,
                               float rtol = 1e-5f) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  if (!is_float(expected.dtype())) {
    EXPECT_EQ(actual.to_int64_vector(), expected.to_int64_vector());
    return;
  }
  const auto a = actual.to_float_vector();
  const auto b = expected.to_float_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << "at flat index " << i;
      continue;
    }
    EXPECT_NEAR(a[i], b[i], atol + rtol * std::fabs(b[i])) << "at flat index " << i;
  }
}

}  // namespace dc::testing
