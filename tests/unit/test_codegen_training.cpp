// The naive device kernels of the dc-internal training ops (codegen/template_reference_training.cpp)
// on the host emulator against the CPU reference, on fresh random inputs (labels and
// indices in range), outputs poisoned first, within the error model's bound
// (variant_tolerance): every training-op workload of the tiny examples' training steps
// (SGD with momentum and AdamW), as the reference kernel and as opaque_generic, plus the
// ops those steps lack (Dropout, AveragePoolGrad, strided/grouped convolution gradients).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "candidates.h"
#include "emulator.h"
#include "estimator_testing.h"
#include "generate.h"
#include "ir/multi_cast.h"
#include "ir/workload.h"
#include "multi_cast_testing.h"
#include "nvrtc.h"
#include "param_space.h"
#include "random_inputs.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "testing.h"
#include "training_testing.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

bool has_training_op(const Graph& g) {
  for (const auto& n : g.nodes)
    if (n.op.starts_with("dc.")) return true;
  return false;
}

// Emulates `k` on random inputs (poisoned outputs) and compares every output with the CPU
// reference of the workload graph. Returns the number of outputs compared.
// `fixed`: inputs given instead of drawn.
int expect_matches_reference(const Workload& w, const GeneratedKernel& k, uint32_t seed,
                             const ref::TensorMap& fixed = {}) {
  SCOPED_TRACE(fmt::format("{} {} ({})", w.canonical.substr(0, 120), k.template_name, k.variant_key));
  const std::vector<Tensor> in = random_workload_inputs(w, seed);
  ref::TensorMap inputs;
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) inputs[w.graph.inputs[i]] = in[i];
  for (const auto& [name, t] : fixed) inputs.at(name) = t;
  std::vector<Tensor> buffers(k.buffers.size());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input) {
      buffers[i] = inputs.at(b.name);
    } else {
      Tensor t(b.dtype, b.shape);
      if (b.dtype == DType::f32)
        std::fill_n(t.mutable_data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
      buffers[i] = t;
    }
  }
  // NVRTC (the GPU's compiler) must accept what the host emulator's compiler did.
  const CompileResult cr = compile_cuda(k.source, "sm_80");
  EXPECT_TRUE(cr.ok) << cr.error << "\n" << cr.log;
  const EmulatorResult r = emulate(k, buffers);
  EXPECT_TRUE(r.ok) << r.error;
  if (!r.ok) return 0;
  const auto expected = ref::run_graph(w.graph, inputs);
  const Tolerance tol = variant_tolerance("fp32", w);
  int compared = 0;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (k.buffers[i].role != BufferRole::output) continue;
    const ref::Comparison c = ref::compare_tensors(buffers[i], expected.at(k.buffers[i].name), tol.rtol, tol.atol);
    EXPECT_TRUE(c.pass) << k.buffers[i].name << ": rel L2 " << c.rel_l2_error << ", max abs "
                        << c.max_abs_error << " " << c.problem;
    ++compared;
  }
  return compared;
}

TEST(CodegenTraining, EveryTrainingWorkloadOfTheExamplesMatchesTheReference) {
  std::set<std::string> ops;
  int compared = 0;
  const GpuSpec gpu = testing::spec_a100();
  for (const char* model : {"tiny_cnn", "tiny_transformer"})
    for (OptimizerKind opt : {OptimizerKind::sgd, OptimizerKind::adamw}) {
      const Graph g = testing::training_step(model, opt);
      const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
      for (const auto& w : set.workloads) {
        if (!has_training_op(w.graph)) continue;
        for (const auto& n : w.graph.nodes) ops.insert(n.op);
        compared += expect_matches_reference(w, generate_reference(w), 11);
        // The opaque_generic variant with the most threads per block (another grid).
        const auto space = enumerate_variants(w, gpu, SpaceOptions{{"fp32"}});
        ASSERT_FALSE(space.empty()) << w.canonical;
        compared += expect_matches_reference(w, generate_kernel(w, space.back()), 12);
      }
    }
  // The ops the two steps must have reached the device (a model change that drops one
  // shows here). Convolution gradients are ConvTransposes, Convs (tiny_cnn's depthwise one)
  // and the implicit-GEMM template's weight-gradient mode, dc.ConvGradWeight
  // (test_codegen_conv_gradients.cpp); BatchNorm's and LayerNorm's gradients,
  // BatchNorm's normalisation and statistics and the cross-entropy loss are ONNX ops on the
  // tuned templates (grad_training_ops.cpp, grad_norm.cpp, lower_batch_norm.cpp,
  // lower_cross_entropy.cpp).
  for (const char* op : {"dc.SoftmaxCrossEntropyGrad", "dc.SgdUpdate", "dc.AdamWUpdate", "dc.Attention",
                         "dc.AttentionGrad", "dc.ConvGradWeight"})
    EXPECT_TRUE(ops.count(op)) << op << " is in no workload";
  for (const char* op : {"dc.SoftmaxCrossEntropy", "dc.BatchNormTrain", "dc.BatchNormStats"})
    EXPECT_FALSE(ops.count(op)) << op << " is in a workload";
  EXPECT_GE(compared, 20);
}

// One dc.* node over graph inputs, as a workload.
Workload single_node(const std::string& op, std::vector<std::pair<std::string, TensorInfo>> inputs,
                     std::vector<std::pair<std::string, TensorInfo>> outputs, Attributes attrs) {
  Graph g;
  g.opset = 17;
  Node n;
  n.name = "n";
  n.op = op;
  n.attrs = std::move(attrs);
  for (auto& [name, info] : inputs) {
    g.inputs.push_back(name);
    g.tensors[name] = info;
    n.inputs.push_back(name);
  }
  for (auto& [name, info] : outputs) {
    g.outputs.push_back(name);
    g.tensors[name] = info;
    n.outputs.push_back(name);
  }
  g.nodes.push_back(n);
  return make_workload(g, {0}, ClusterKind::opaque);
}

TensorInfo f32(Shape s) { return {DType::f32, std::move(s)}; }

TEST(CodegenTraining, DropoutDrawsTheReferenceMaskOnTheDevice) {
  Attributes a;
  a.set("ratio", 0.3f);
  a.set("seed", int64_t{0x123456789});
  const Workload w = single_node("dc.Dropout", {{"x", f32({3, 41})}, {"step", {DType::i64, {}}}},
                                 {{"y", f32({3, 41})}, {"mask", f32({3, 41})}}, a);
  EXPECT_EQ(expect_matches_reference(w, generate_reference(w), 5), 2);
}

// The fused multi-tensor optimizer kernel: one launch over a bucket of tensors of odd
// extents (segment boundaries inside warps and blocks), every output of every tensor against
// the reference, for SGD with and without momentum and for AdamW, and scaled and gated (fp16's
// loss scale S, the gradients read as G / S, and its overflow flag) with the step taken and
// skipped.
TEST(CodegenTraining, MultiTensorUpdateCoversEveryTensorOfTheBucket) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {1}, {2, 2, 67}, {300}};
  struct Case {
    const char* op;
    std::vector<const char*> in, out;  // per tensor
    bool step;
  };
  const Case cases[] = {{"dc.SgdUpdate", {"w", "g", "m"}, {"w@next", "m@next"}, false},
                        {"dc.SgdUpdate", {"w", "g"}, {"w@next"}, false},
                        {"dc.AdamWUpdate", {"w", "g", "m", "v"}, {"w@next", "m@next", "v@next"}, true}};
  for (const Case& c : cases)
    for (int gate : {-1, 0, 1}) {  // ungated; gated and skipped; gated and taken
    std::vector<std::pair<std::string, TensorInfo>> ins, outs;
    for (size_t t = 0; t < shapes.size(); ++t) {
      for (const char* i : c.in) ins.emplace_back(fmt::format("{}{}", i, t), f32(shapes[t]));
      for (const char* o : c.out) outs.emplace_back(fmt::format("{}{}", o, t), f32(shapes[t]));
    }
    if (c.step) ins.emplace_back("step", TensorInfo{DType::i64, {}});
    if (gate >= 0) ins.emplace_back("scale", f32({1}));
    if (gate >= 0) ins.emplace_back("finite", TensorInfo{DType::boolean, {}});
    Attributes a;
    if (gate >= 0) a.set("scaled", int64_t{1});  // as fp16 steps build them: G / S in the kernel
    if (gate >= 0) a.set("gated", int64_t{1});
    a.set("lr", 0.05f);
    a.set("weight_decay", 0.01f);
    a.set("momentum", c.in.size() == 3 ? 0.9f : 0.f);
    a.set("beta1", 0.9f);
    a.set("beta2", 0.999f);
    a.set("epsilon", 1e-8f);
    const Workload w = single_node(c.op, ins, outs, a);
    ref::TensorMap fixed;  // the scale and the flag are the last inputs (the workload renames its tensors)
    if (gate >= 0) fixed[w.graph.inputs.back()] = Tensor::scalar<bool>(gate == 1);
    if (gate >= 0) fixed[w.graph.inputs[w.graph.inputs.size() - 2]] = Tensor::from_vector<float>({1}, {4096.f});
    const GeneratedKernel k = generate_reference(w);
    EXPECT_EQ(k.launches.size(), 1u) << "one launch for the whole bucket";
    EXPECT_EQ(expect_matches_reference(w, k, 21, fixed), static_cast<int>(outs.size())) << c.op << " gate " << gate;
    // The variants: one element a thread, and float4s (the extents above leave tails of
    // 3, 3, 1, 0 and 0).
    const auto space = enumerate_variants(w, testing::spec_a100(), SpaceOptions{{"fp32"}});
    ASSERT_EQ(space.size(), 2u);
    EXPECT_EQ(k.source.find("float dc_in0[4]"), std::string::npos) << "the reference stays one element a thread";
    for (const Variant& v : space) {
      const GeneratedKernel tuned = generate_kernel(w, v);
      EXPECT_EQ(tuned.source.find("float dc_in0[4]") != std::string::npos, v.key().find("vec=4") != std::string::npos)
          << v.key();
      EXPECT_EQ(expect_matches_reference(w, tuned, 22, fixed), static_cast<int>(outs.size())) << v.key();
    }
  }
}

// fp16's overflow check (ir/nonfinite_check.h): one launch over every gradient, the lanes
// spread over several blocks (700 lanes; 256 threads a block in the reference), an inf or
// NaN planted in one element of one tensor per case (each tensor once: extents not multiples
// of the lanes, the last element of the last tensor, and a tensor that wraps around the
// lanes twice), and every gradient finite. The flags against the reference, outputs
// poisoned, for the reference kernel and every opaque_generic variant (other block sizes);
// the reference's own flags against the definition (one lane set, the planted element's).
TEST(CodegenTraining, NonFiniteCheckFlagsTheLaneOfThePlantedInfOrNan) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {1}, {2, 2, 67}, {300}, {1999}};
  constexpr int64_t kLanes = 700;
  std::vector<std::pair<std::string, TensorInfo>> ins;
  for (size_t t = 0; t < shapes.size(); ++t) ins.emplace_back(fmt::format("g{}", t), f32(shapes[t]));
  Attributes a;
  a.set("lanes", kLanes);
  const Workload w = single_node("dc.NonFiniteCheck", ins, {{"flags", f32({kLanes})}}, a);
  const auto space = enumerate_variants(w, testing::spec_a100(), SpaceOptions{{"fp32"}});
  ASSERT_FALSE(space.empty());
  const float poison[] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::infinity()};
  // (tensor, element) planted; tensor -1: none.
  const std::vector<std::pair<int, int64_t>> cases = {{-1, 0}, {0, 14}, {1, 3},   {2, 0},
                                                      {3, 201}, {4, 299}, {5, 1998}, {5, 1401}};
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto [tensor, element] = cases[c];
    SCOPED_TRACE(fmt::format("case {}: tensor {} element {}", c, tensor, element));
    ref::TensorMap grads;
    for (size_t t = 0; t < shapes.size(); ++t)
      grads[w.graph.inputs[t]] = testing::random_tensor(shapes[t], static_cast<uint32_t>(40 + 7 * c + t), -3e4f, 3e4f);
    if (tensor >= 0) grads.at(w.graph.inputs[static_cast<size_t>(tensor)]).mutable_data<float>()[element] = poison[c % 3];
    const Tensor flags = ref::run_graph(w.graph, grads).at(w.graph.outputs[0]);
    const std::vector<float> f = flags.to_float_vector();
    for (int64_t lane = 0; lane < kLanes; ++lane)
      EXPECT_EQ(f[static_cast<size_t>(lane)], tensor >= 0 && lane == element % kLanes ? 1.f : 0.f) << "lane " << lane;
    const GeneratedKernel k = generate_reference(w);
    EXPECT_EQ(k.launches.size(), 1u) << "one launch for every gradient";
    EXPECT_GE(k.launches[0].grid[0], 3) << "the lanes span several blocks";
    EXPECT_EQ(expect_matches_reference(w, k, 23, grads), 1);
    for (const Variant& v : space) EXPECT_EQ(expect_matches_reference(w, generate_kernel(w, v), 24, grads), 1) << v.key();
  }
}

// Emulates `k` with `in` bound to its inputs and every output's bytes poisoned (0xFF: an
// unwritten f16/bf16 element reads as a NaN whose bits no Cast writes); returns the buffers.
std::vector<Tensor> emulate_poisoned(const GeneratedKernel& k, const ref::TensorMap& in) {
  std::vector<Tensor> buffers(k.buffers.size());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input) {
      buffers[i] = in.at(b.name);
      continue;
    }
    buffers[i] = Tensor(b.dtype, b.shape);
    std::memset(buffers[i].raw_mutable(), 0xFF, buffers[i].nbytes());
  }
  const CompileResult cr = compile_cuda(k.source, "sm_80");
  EXPECT_TRUE(cr.ok) << cr.error << "\n" << cr.log;
  const EmulatorResult r = emulate(k, buffers);
  EXPECT_TRUE(r.ok) << r.error;
  return buffers;
}

// Two NaNs of f16/bf16 `t`, the device's not the poison: the device writes the PTX canonical
// NaN 0x7FFF, the reference float_to_half's 0x7E00 (any NaN is a NaN to every reader).
bool both_nan_written(DType t, uint16_t got, uint16_t want) {
  const uint16_t exponent = t == DType::f16 ? 0x7C00 : 0x7F80;
  auto nan = [&](uint16_t b) { return (b & exponent) == exponent && (b & ~exponent & 0x7FFF) != 0; };
  return got != 0xFFFF && nan(got) && nan(want);
}

// The AMP step's weight Casts as one kernel (ir/multi_cast.h): tensors of extents no
// multiple of 4 (float4 tails of 1 to 3, a tensor of one element), values whose rounding is
// delicate (ties, subnormals, past fp16's range, inf, NaN), f16 and bf16 copies. The
// reference kernel and every opaque_generic variant (one float a thread and a float4 a
// thread) on the host emulator, outputs poisoned, bit for bit against the CPU reference
// (a NaN as any NaN but the poison).
TEST(CodegenTraining, MultiCastMatchesTheReferenceBitForBit) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {1}, {2, 2, 67}, {300}, {1999}};
  for (DType to : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(to));
    std::vector<std::pair<std::string, TensorInfo>> ins, outs;
    for (size_t t = 0; t < shapes.size(); ++t) {
      ins.emplace_back(fmt::format("w{}", t), f32(shapes[t]));
      outs.emplace_back(fmt::format("c{}", t), TensorInfo{to, shapes[t]});
    }
    Attributes a;
    a.set("to", static_cast<int64_t>(to));
    const Workload w = single_node(kMultiCast, ins, outs, a);
    ref::TensorMap in;
    for (size_t t = 0; t < shapes.size(); ++t)
      in[w.graph.inputs[t]] = testing::cast_test_values(shapes[t], static_cast<uint32_t>(50 + t));
    const ref::TensorMap want = ref::run_graph(w.graph, in);
    std::vector<GeneratedKernel> kernels = {generate_reference(w)};
    bool float4s = false;
    for (const Variant& v : enumerate_variants(w, testing::spec_a100(), SpaceOptions{{"fp32"}})) {
      kernels.push_back(generate_kernel(w, v));
      float4s = float4s || v.params.at("vec") == 4;
    }
    EXPECT_TRUE(float4s) << "a variant reads float4s";
    EXPECT_GE(kernels.size(), 3u);
    for (const GeneratedKernel& k : kernels) {
      SCOPED_TRACE(k.variant_key);
      EXPECT_EQ(k.launches.size(), 1u) << "one launch for every weight";
      const std::vector<Tensor> got = emulate_poisoned(k, in);
      int compared = 0;
      for (size_t i = 0; i < k.buffers.size(); ++i) {
        if (k.buffers[i].role != BufferRole::output) continue;
        const Tensor& ref_copy = want.at(k.buffers[i].name);
        ASSERT_EQ(got[i].nbytes(), ref_copy.nbytes());
        const auto* g16 = reinterpret_cast<const uint16_t*>(got[i].raw());
        const auto* r16 = reinterpret_cast<const uint16_t*>(ref_copy.raw());
        int wrong = 0;
        for (int64_t e = 0; e < ref_copy.numel(); ++e)
          if (g16[e] != r16[e] && !both_nan_written(got[i].dtype(), g16[e], r16[e]) && ++wrong <= 2)
            ADD_FAILURE() << k.buffers[i].name << " element " << e << ": bits " << std::hex << g16[e] << ", want " << r16[e];
        EXPECT_EQ(wrong, 0) << k.buffers[i].name;
        ++compared;
      }
      EXPECT_EQ(compared, static_cast<int>(shapes.size()));
    }
  }
}

Attributes window(std::vector<int64_t> kernel, std::vector<int64_t> strides, std::vector<int64_t> pads) {
  Attributes a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  return a;
}

TEST(CodegenTraining, PoolGradientsMatchTheReference) {
  Attributes avg = window({3, 3}, {2, 2}, {1, 1, 1, 1});
  avg.set("input_shape", std::vector<int64_t>{2, 3, 9, 8});
  for (int64_t include_pad : {0, 1}) {
    avg.set("count_include_pad", include_pad);
    const Workload w = single_node("dc.AveragePoolGrad", {{"dy", f32({2, 3, 5, 4})}}, {{"dx", f32({2, 3, 9, 8})}}, avg);
    EXPECT_EQ(expect_matches_reference(w, generate_reference(w), 6), 1);
  }
  const Workload m = single_node("dc.MaxPoolGrad", {{"dy", f32({2, 3, 5, 4})}, {"x", f32({2, 3, 9, 8})}},
                                 {{"dx", f32({2, 3, 9, 8})}}, window({3, 3}, {2, 2}, {1, 1, 1, 1}));
  EXPECT_EQ(expect_matches_reference(m, generate_reference(m), 7), 1);
}

TEST(CodegenTraining, StridedGroupedConvolutionGradientsMatchTheReference) {
  Attributes a = window({3, 2}, {2, 1}, {1, 0, 1, 1});
  a.set("dilations", std::vector<int64_t>{1, 2});
  a.set("group", int64_t{2});
  // X [2, 4, 7, 6], W [6, 2, 3, 2]: out 4 x 5.
  Attributes data = a;
  data.set("input_shape", std::vector<int64_t>{2, 4, 7, 6});
  const Workload gd = single_node("dc.ConvGradData", {{"dy", f32({2, 6, 4, 5})}, {"w", f32({6, 2, 3, 2})}},
                                  {{"dx", f32({2, 4, 7, 6})}}, data);
  EXPECT_EQ(expect_matches_reference(gd, generate_reference(gd), 8), 1);
  Attributes weight = a;
  weight.set("weight_shape", std::vector<int64_t>{6, 2, 3, 2});
  const Workload gw = single_node("dc.ConvGradWeight", {{"x", f32({2, 4, 7, 6})}, {"dy", f32({2, 6, 4, 5})}},
                                  {{"dw", f32({6, 2, 3, 2})}}, weight);
  EXPECT_EQ(expect_matches_reference(gw, generate_reference(gw), 9), 1);
}

TEST(CodegenTraining, EmbeddingGradientSumsDuplicateIndices) {
  Attributes a;
  a.set("axis", int64_t{0});
  a.set("data_shape", std::vector<int64_t>{5, 6});
  // 12 indices into 5 rows: duplicates are certain.
  const Workload w = single_node("dc.GatherGrad", {{"dy", f32({3, 4, 6})}, {"idx", {DType::i64, {3, 4}}}},
                                 {{"dd", f32({5, 6})}}, a);
  EXPECT_EQ(expect_matches_reference(w, generate_reference(w), 10), 1);
}

}  // namespace
}  // namespace dc
