// apply_precision: which tensors an fp16/bf16 plan stores in the reduced type, which stay
// f32 (model inputs/outputs, chains into sensitive ops, scalars), constant clamping, and the
// reference executor running the rewritten graph close to the f32 one.
#include <cmath>
#include <limits>

#include "pass_testing.h"
#include "passes/apply_precision.h"

namespace dc {
namespace {

using namespace dc::testing;

constexpr float kInf = std::numeric_limits<float>::infinity();

// x -> MatMul(W1) -> Add(b1) -> Relu -> r; scores = MatMul(r, Wk) * scale + mask ->
// Softmax -> p; MatMul(p, r) -> Add(r) -> LayerNormalization -> y (model output).
Graph block(float mask_value) {
  Graph g;
  add_input(g, "x", {4, 8});
  add_initializer(g, "W1", random_tensor({8, 8}, 1));
  add_initializer(g, "b1", random_tensor({8}, 2));
  add_initializer(g, "Wk", random_tensor({8, 4}, 3));
  add_initializer(g, "scale", Tensor::scalar<float>(0.35f));
  std::vector<float> mask(16, 0.f);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) mask[i * 4 + j] = mask_value;
  add_initializer(g, "mask", Tensor::from_vector<float>({4, 4}, mask));
  add_initializer(g, "gamma", random_tensor({8}, 4, 0.5f, 1.5f));
  add_initializer(g, "beta", random_tensor({8}, 5));
  add_node(g, "MatMul", {"x", "W1"}, {"h"});
  add_node(g, "Add", {"h", "b1"}, {"hb"});
  add_node(g, "Relu", {"hb"}, {"r"});
  add_node(g, "MatMul", {"r", "Wk"}, {"s"});
  add_node(g, "Mul", {"s", "scale"}, {"ss"});
  add_node(g, "Add", {"ss", "mask"}, {"sm"});
  add_node(g, "Softmax", {"sm"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(g, "MatMul", {"p", "r"}, {"o"});
  add_node(g, "Add", {"o", "r"}, {"res"});
  add_node(g, "LayerNormalization", {"res", "gamma", "beta"}, {"y"},
           attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
  g.outputs = {"y"};
  return with_types(g);
}

DType dt(const Graph& g, const std::string& t) { return g.info(t).dtype; }

TEST(PassApplyPrecision, Fp32AndTf32LeaveTheGraphAlone) {
  const Graph g = block(-1e9f);
  for (Precision p : {Precision::fp32, Precision::tf32}) {
    std::vector<std::string> notes;
    const Graph out = apply_precision(g, p, &notes);
    for (const auto& [name, info] : out.tensors) EXPECT_EQ(info.dtype, DType::f32) << name;
    EXPECT_TRUE(notes.empty());
    for (const auto& [name, t] : g.initializers) EXPECT_TRUE(out.initializers.at(name).bitwise_equal(t));
  }
}

TEST(PassApplyPrecision, Fp16StoresActivationsAndWeightsKeepsSensitiveChainsAndEdges) {
  const Graph out = apply_precision(block(0.f), Precision::fp16);
  expect_well_formed(out);
  // Model edges keep the model's dtype.
  EXPECT_EQ(dt(out, "x"), DType::f32);
  EXPECT_EQ(dt(out, "y"), DType::f32);
  // Weights and ordinary activations are stored in f16.
  // Weights (the additive mask and LayerNorm's gamma and beta included) and ordinary
  // activations are stored in f16.
  for (const char* t : {"W1", "b1", "Wk", "mask", "gamma", "beta", "h", "hb", "r", "p"})
    EXPECT_EQ(dt(out, t), DType::f16) << t;
  EXPECT_EQ(out.initializers.at("W1").dtype(), DType::f16);
  // Attention scores (MatMul output through scale and mask into Softmax) and the residual
  // sum entering LayerNorm (the MatMul output o and the Add) stay f32; so does the
  // one-element scale.
  for (const char* t : {"s", "ss", "sm", "o", "res", "scale"})
    EXPECT_EQ(dt(out, t), DType::f32) << t;
}

TEST(PassApplyPrecision, WeightsAreRoundedToNearestOnce) {
  const Graph g = block(0.f);
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    const Graph out = apply_precision(g, p);
    const auto before = g.initializers.at("W1").to_float_vector();
    const auto after = out.initializers.at("W1").to_float_vector();
    const double u = p == Precision::fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    int changed = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_LE(std::fabs(after[i] - before[i]), u * std::fabs(before[i]) + 1e-7) << i;
      changed += after[i] != before[i];
    }
    EXPECT_GT(changed, 0);  // really converted, not copied
    EXPECT_EQ(out.initializers.at("W1").nbytes() * 2, g.initializers.at("W1").nbytes());
  }
}

// A constant stored in f16 with values beyond 65504 (an additive mask of -inf or -1e9) is
// clamped, with a note.
TEST(PassApplyPrecision, OutOfRangeConstantsAreClampedWithANote) {
  for (float big : {-1e9f, -kInf}) {
    Graph g;
    add_input(g, "x", {2, 3});
    add_initializer(g, "c", Tensor::from_vector<float>({2, 3}, {0, big, 1, 2, 70000.f, 3}));
    add_node(g, "Add", {"x", "c"}, {"a"});
    add_node(g, "Relu", {"a"}, {"r"});
    add_node(g, "Mul", {"r", "x"}, {"y"});
    g.outputs = {"y"};
    g = with_types(g);
    std::vector<std::string> notes;
    const Graph out = apply_precision(g, Precision::fp16, &notes);
    const auto c = out.initializers.at("c").to_float_vector();
    EXPECT_EQ(c[1], -65504.f);
    EXPECT_EQ(c[4], 65504.f);
    EXPECT_EQ(c[3], 2.f);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("'c'"), std::string::npos) << notes[0];
    EXPECT_NE(notes[0].find("2 of 6"), std::string::npos) << notes[0];
    // bf16 holds 1e9 and 70000; only an infinity is clamped.
    notes.clear();
    const Graph b = apply_precision(g, Precision::bf16, &notes);
    EXPECT_EQ(notes.size(), std::isinf(big) ? 1u : 0u);
    EXPECT_TRUE(std::isfinite(b.initializers.at("c").to_float_vector()[1]));
  }
}

TEST(PassApplyPrecision, IntegersBoolAndViewsFollowTheRules) {
  Graph g;
  add_input(g, "ids", {2, 3}, DType::i64);
  add_initializer(g, "table", random_tensor({10, 4}, 9));
  add_initializer(g, "shape", Tensor::from_vector<int64_t>({2}, {3, 8}));
  add_node(g, "Gather", {"table", "ids"}, {"e"});     // view of the f16 table: f16
  add_node(g, "Relu", {"e"}, {"r"});
  add_node(g, "Reshape", {"r", "shape"}, {"y"});      // model output through a view
  add_node(g, "Greater", {"e", "r"}, {"flag"});        // bool stays bool
  add_node(g, "Cast", {"flag"}, {"flag_f"}, attrs({{"to", int64_t{1}}}));
  add_node(g, "Mul", {"flag_f", "e"}, {"z"});
  add_node(g, "Reshape", {"z", "shape"}, {"z2"});
  g.outputs = {"y", "z2"};
  // Types by hand (the random-input helper gives every input f32).
  auto type = [&](const char* t, DType d, Shape s) { g.tensors[t] = TensorInfo{d, std::move(s)}; };
  type("e", DType::f32, {2, 3, 4});
  type("r", DType::f32, {2, 3, 4});
  type("y", DType::f32, {3, 8});
  type("flag", DType::boolean, {2, 3, 4});
  type("flag_f", DType::f32, {2, 3, 4});
  type("z", DType::f32, {2, 3, 4});
  type("z2", DType::f32, {3, 8});
  const Graph out = apply_precision(g, Precision::fp16);
  expect_well_formed(out);
  EXPECT_EQ(dt(out, "ids"), DType::i64);
  EXPECT_EQ(dt(out, "shape"), DType::i64);
  EXPECT_EQ(dt(out, "flag"), DType::boolean);
  EXPECT_EQ(dt(out, "table"), DType::f16);
  EXPECT_EQ(dt(out, "e"), DType::f16);
  // Outputs keep f32, and the view producing one pulls its input along.
  EXPECT_EQ(dt(out, "y"), DType::f32);
  EXPECT_EQ(dt(out, "r"), DType::f32);
  EXPECT_EQ(dt(out, "z"), DType::f32);
  // A Cast to float follows the storage type, its attribute with it.
  EXPECT_EQ(dt(out, "flag_f"), DType::f16);
  EXPECT_EQ(find_node(out, "Cast")->attrs.get_int("to"), static_cast<int64_t>(DType::f16));
}

// The CPU reference runs the rewritten graph (IR rule for mixed float dtypes) and stays
// close to the f32 graph: relative L2 within a few storage roundings.
TEST(PassApplyPrecision, ReferenceRunsTheReducedGraphCloseToF32) {
  const Graph g = block(-kInf);
  const auto in = random_inputs(g, 21);
  const auto want = ref::run_graph(g, in).at("y").to_float_vector();
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    const Graph out = apply_precision(g, p);
    const Tensor got_t = ref::run_graph(out, in).at("y");
    ASSERT_EQ(got_t.dtype(), DType::f32);
    const auto got = got_t.to_float_vector();
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      num += (got[i] - want[i]) * (got[i] - want[i]);
      den += want[i] * want[i];
    }
    const double u = p == Precision::fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    EXPECT_LT(std::sqrt(num / den), 40 * u) << precision_name(p);
    EXPECT_GT(std::sqrt(num / den), 0.0) << precision_name(p);  // really ran in reduced precision
  }
}

}  // namespace
}  // namespace dc
