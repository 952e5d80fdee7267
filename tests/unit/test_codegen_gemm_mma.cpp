// Tensor-core paths (tf32, fp16, bf16) of the GEMM-family templates (codegen/
// template_gemm_mma.cpp): every case builds a small model graph, cuts the cluster out, runs
// hand-set and enumerated tensor-core variants on the host emulator (whose mma.sync,
// ldmatrix and cp.async follow the PTX ISA warp-exactly) with fresh seeded random inputs and
// NaN-poisoned outputs, and compares with the CPU reference executor at the error model's
// kernel_tolerance (common/ir/tolerance.h, docs/precision.md). On the fp16/bf16 paths the
// f32 inputs are first rounded to the math type, so that the reference multiplies exactly
// what the tensor cores do and only the fp32 accumulation order differs (the tolerance
// then counts no operand rounding). Each source is also compiled with NVRTC for sm_80.
// Also: the shared-memory row pads make every fragment read bank-conflict-free.
#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "emulator.h"
#include "gpu/gpu_catalog.h"
#include "prune.h"
#include "estimator_testing.h"
#include "generate.h"
#include "ir/tolerance.h"
#include "ir/workload.h"
#include "model_builder.h"
#include "nvrtc.h"
#include "param_space.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "ref/storage_dtypes.h"
#include "operand_sum_testing.h"
#include "swapped_matmul_testing.h"
#include "testing.h"

namespace dc {
namespace {

using testing::ModelBuilder;
using testing::random_tensor;

const char* const kPaths[] = {"tf32", "fp16", "bf16"};

const GpuSpec& a100() {
  static const GpuSpec g = testing::spec_a100();
  return g;
}

Attributes conv_attrs(std::vector<int64_t> kernel, std::vector<int64_t> strides,
                      std::vector<int64_t> pads, std::vector<int64_t> dilations, int64_t group = 1) {
  Attributes a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("group", group);
  return a;
}

// A hand-set tensor-core variant.
Variant mma_variant(const Workload& w, const std::string& precision, int64_t bm, int64_t bn,
                    int64_t bk, int64_t wm, int64_t wn, int64_t stages, int64_t split = 1) {
  Variant v;
  v.template_name = w.kind == ClusterKind::conv ? "conv_implicit_gemm" : "gemm_tiled";
  v.precision = precision;
  v.params = {{"block_m", bm}, {"block_n", bn}, {"block_k", bk},         {"warp_m", wm},
              {"warp_n", wn},  {"vec", 4},      {"stages", stages}, {"split_k", split}};
  return v;
}

// Tensor-core hand-set variants covering 1, 2 and 4 warps, every stage count, K tiles of one
// and two k16 steps, warp tiles of 1x2 up to 2x4 fragments.
std::vector<Variant> hand_variants(const Workload& w, const std::string& p) {
  const int64_t bk = p == "tf32" ? 16 : 32;
  return {mma_variant(w, p, 32, 32, bk, 16, 16, 2), mma_variant(w, p, 64, 32, 32, 32, 16, 3),
          mma_variant(w, p, 32, 64, bk, 32, 32, 4), mma_variant(w, p, 16, 16, 16, 16, 16, 2)};
}

// Values exactly representable in the math path's operand type (fp16/bf16), unchanged for
// tf32 (the tolerance counts its operand rounding).
Tensor math_representable(Tensor t, const std::string& precision) {
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (precision == "fp16") p[i] = half_to_float(float_to_half(p[i]));
    if (precision == "bf16") p[i] = bf16_to_float(float_to_bf16(p[i]));
  }
  return t;
}

uint32_t next_seed() {
  static uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  return seed++;
}

// Storage dtypes of a workload's tensors: its inputs, its outputs, the other node outputs
// (as the precision policy stores them; the heavy op reads f16/bf16 directly).
struct Storage {
  DType in = DType::f32, out = DType::f32, mid = DType::f32;
};
Workload retyped(Workload w, const Storage& st) {
  for (const auto& name : w.graph.inputs) w.graph.tensors[name].dtype = st.in;
  for (const auto& n : w.graph.nodes)
    for (const auto& o : n.outputs) w.graph.tensors[o].dtype = st.mid;
  for (const auto& name : w.graph.outputs) w.graph.tensors[name].dtype = st.out;
  return w;
}

// Generates, emulates and compares one variant; the GEMM reduction length is `k`.
// `exact_operands`: the GEMM operands are the (rounded) inputs themselves; false when a
// fused prologue computes one (its values are then rounded to the math type too).
void check_mma(const Workload& w, const Variant& v, int64_t k, bool nvrtc = true,
               bool exact_operands = true) {
  const uint32_t seed0 = next_seed();
  SCOPED_TRACE(fmt::format("{} (input seed {})", v.key(), seed0));
  GeneratedKernel kern;
  ASSERT_NO_THROW(kern = generate_kernel(w, v));
  std::vector<Tensor> buffers(kern.buffers.size());
  ref::TensorMap inputs;
  uint32_t seed = seed0;
  for (size_t i = 0; i < kern.buffers.size(); ++i) {
    const KernelBuffer& b = kern.buffers[i];
    if (b.role == BufferRole::input) {
      buffers[i] = ref::convert_float(math_representable(random_tensor(b.shape, seed++), v.precision),
                                      b.dtype);
      inputs[b.name] = buffers[i];
    } else {
      Tensor t(DType::f32, b.shape);  // poisoned: an unwritten element fails the comparison
      std::fill_n(t.mutable_data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
      buffers[i] = ref::convert_float(t, b.dtype);
    }
  }
  std::future<CompileResult> compiled;
  if (nvrtc)
    compiled = std::async(std::launch::async, [&kern] { return compile_cuda(kern.source, "sm_80"); });
  const EmulatorResult r = emulate(kern, buffers);
  if (nvrtc) {
    const CompileResult cr = compiled.get();
    EXPECT_TRUE(cr.ok) << cr.error << "\n" << cr.log;
  }
  ASSERT_TRUE(r.ok) << r.error << "\n" << kern.source;
  const auto expected = ref::run_graph(w.graph, inputs);
  // fp16/bf16: the operands are exactly the math type's values (no operand rounding).
  // Stored f16/bf16 inputs count as their own dtype (the tolerance then decides whether
  // the math path multiplies them exactly).
  const DType stored = kern.buffers.empty() ? DType::f32 : kern.buffers.front().dtype;
  const DType operands = !exact_operands          ? DType::f32
                         : stored != DType::f32   ? stored
                         : v.precision == "fp16" ? DType::f16
                         : v.precision == "bf16" ? DType::bf16
                                                 : DType::f32;
  for (size_t i = 0; i < kern.buffers.size(); ++i) {
    if (kern.buffers[i].role != BufferRole::output) continue;
    const Tensor& want = expected.at(kern.buffers[i].name);
    const Tolerance tol = kernel_tolerance(v.precision, operands, kern.buffers[i].dtype, k);
    const ref::Comparison c = ref::compare_tensors(buffers[i], want, tol.rtol, tol.atol);
    EXPECT_TRUE(c.pass) << kern.buffers[i].name << ": rel L2 " << c.rel_l2_error << ", max abs "
                        << c.max_abs_error << " (rtol " << tol.rtol << ") " << c.problem;
  }
}

// Hand-set variants plus the first enumerated one of the path (largest block first).
void check_paths(const Workload& w, int64_t k, bool exact_operands = true) {
  for (const char* p : kPaths) {
    for (const auto& v : hand_variants(w, p)) check_mma(w, v, k, true, exact_operands);
    auto space = enumerate_variants(w, a100(), SpaceOptions{{p}});
    ASSERT_FALSE(space.empty()) << p;
    for (const auto& v : space) EXPECT_EQ(v.precision, p);
    check_mma(w, space.front(), k, true, exact_operands);
    check_mma(w, space.back(), k, false, exact_operands);
  }
}

// ---- gemm_tiled ----------------------------------------------------------------------------

TEST(CodegenGemmMma, MatMulOddSizes) {
  // M, N, K no multiple of any tile; K and N odd: every operand through registers on the
  // fp16/bf16 paths, 4-byte copies on tf32.
  ModelBuilder m;
  m.input("a", {37, 29}).weight("b", {29, 45});
  m.node("MatMul", {"a", "b"}, "y", {37, 45});
  check_paths(m.workload(ClusterKind::gemm), 29);
}

TEST(CodegenGemmMma, MatMulSixteenByteCopies) {
  // K and N multiples of 8: 16-byte cp.async for A (rows of k) and B (rows of n) on every
  // path; M not a tile multiple.
  ModelBuilder m;
  m.input("a", {70, 48}).weight("b", {48, 72});
  m.node("MatMul", {"a", "b"}, "y", {70, 72});
  check_paths(m.workload(ClusterKind::gemm), 48);
}

TEST(CodegenGemmMma, MatMulKSmallerThanBlockK) {
  ModelBuilder m;
  m.input("a", {20, 8}).weight("b", {8, 24});
  m.node("MatMul", {"a", "b"}, "y", {20, 24});
  check_paths(m.workload(ClusterKind::gemm), 8);
}

TEST(CodegenGemmMma, BatchedBroadcastMatMul) {
  // Batch dims broadcast (2 x 3 against 3), batch > 1.
  ModelBuilder m;
  m.input("a", {2, 3, 33, 40}).input("b", {3, 40, 24});
  m.node("MatMul", {"a", "b"}, "y", {2, 3, 33, 24});
  check_paths(m.workload(ClusterKind::gemm), 40);
}

TEST(CodegenGemmMma, FoldedBatchMatMul) {
  // B without batch dims: A's batch folds into M.
  ModelBuilder m;
  m.input("a", {2, 5, 40}).weight("b", {40, 32});
  m.node("MatMul", {"a", "b"}, "y", {2, 5, 32});
  check_paths(m.workload(ClusterKind::gemm), 40);
}

TEST(CodegenGemmMma, SwappedTransposeOperands) {
  // MatMul operands computed by a Transpose swapping the last two dims of a cluster input,
  // read from it in place on every path (swapped_matmul_testing.h): the stored layout picks
  // the shared layout (rows of m/n, or rows of k: ldmatrix .trans or plain), 16-byte copies
  // where the stored rows allow (both_batch_broadcast, b_folded, a_two_dims).
  for (const auto& c : testing::kSwappedCases) {
    SCOPED_TRACE(c.name);
    const Workload w = testing::swapped_matmul(c);
    // Read by address in the stored layout (copied by cp.async, or through registers where
    // the stored rows are odd).
    const auto k = generate_kernel(w, mma_variant(w, "fp16", 32, 32, 32, 16, 16, 3));
    const std::string body = k.source.substr(k.source.find("end of prelude"));
    const int64_t m = c.a[c.a.size() - 2];
    EXPECT_EQ(body.find(fmt::format("dc_a_base + dc_k * {} + dc_row", m)) != std::string::npos, c.in_place_a);
    EXPECT_EQ(body.find(fmt::format("dc_b_base + dc_row * {} + dc_k", c.a.back())) != std::string::npos, c.swap_b);
    check_paths(w, c.a.back());
  }
}

TEST(CodegenGemmMma, SwappedTransposeGemmOperands) {
  // Gemm operands computed by a 2-D Transpose of a cluster input, read from it in place with
  // transA or transB flipped (swapped_matmul_testing.h), every flag pair, on every path.
  for (const auto& c : testing::swapped_gemm_cases()) {
    SCOPED_TRACE(c.name());
    check_paths(testing::swapped_gemm(c), testing::kSwappedGemmK);
  }
}

TEST(CodegenGemmMma, GemmTransposes) {
  // Every transA/transB: A and B each as rows of k or rows of m/n in shared memory
  // (ldmatrix plain and .trans), with alpha, beta and C broadcast along M.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(fmt::format("transA {} transB {}", ta, tb));
      ModelBuilder m;
      m.input("a", ta ? Shape{40, 56} : Shape{56, 40}).weight("b", tb ? Shape{48, 40} : Shape{40, 48});
      m.weight("c", {48});
      Attributes at;
      at.set("transA", int64_t{ta});
      at.set("transB", int64_t{tb});
      at.set("alpha", 0.5f);
      at.set("beta", 2.f);
      m.node("Gemm", {"a", "b", "c"}, "y", {56, 48}, at);
      check_paths(m.workload(ClusterKind::gemm), 40);
    }
}

TEST(CodegenGemmMma, EpilogueBroadcastResidualActivation) {
  // Bias broadcast along M, a residual input, an activation; A through a fused prologue.
  ModelBuilder m;
  m.input("x", {50, 64}).weight("b", {64, 40}).weight("bias", {40}).input("res", {50, 40});
  m.node("Sigmoid", {"x"}, "a", {50, 64});
  m.node("MatMul", {"a", "b"}, "y", {50, 40}).node("Add", {"y", "bias"}, "z", {50, 40});
  m.node("Add", {"z", "res"}, "s", {50, 40}).node("Relu", {"s"}, "r", {50, 40});
  check_paths(m.workload(ClusterKind::gemm), 64, false);
}

TEST(CodegenGemmMma, SplitK) {
  // Split-K: straight into the output, and through the scratch + epilogue kernel.
  for (bool epilogue : {false, true}) {
    ModelBuilder m;
    m.input("a", {24, 512}).weight("b", {512, 40});
    m.node("MatMul", {"a", "b"}, "y", {24, 40});
    if (epilogue) m.weight("bias", {40}).node("Add", {"y", "bias"}, "z", {24, 40});
    const Workload w = m.workload(ClusterKind::gemm);
    for (const char* p : kPaths) {
      check_mma(w, mma_variant(w, p, 32, 32, 32, 16, 16, 3, 4), 512);
      check_mma(w, mma_variant(w, p, 16, 32, 16, 16, 16, 2, 3), 512);
    }
  }
}

// A Linear layer's weight gradient with its bias gradient (the ones row or column, see
// CodegenGemm.OperandSumIsTheBiasGradient) on every tensor-core path, split-K included, and
// stored f16/bf16 (dY, x, dW and db).
TEST(CodegenGemmMma, OperandSumIsTheBiasGradient) {
  for (const auto& c : testing::kOperandSumCases) {
    SCOPED_TRACE(c.name);
    const Workload w = testing::operand_sum_workload(c);
    for (const char* p : kPaths) {
      for (const auto& v : hand_variants(w, p)) check_mma(w, v, c.r, false);
      check_mma(w, mma_variant(w, p, 32, 32, 32, 16, 16, 3, 3), c.r);  // split-K
    }
  }
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const auto& c = testing::kOperandSumCases[2];  // aligned: 16-byte copies of the halves
    const Workload w = retyped(testing::operand_sum_workload(c), {t, t, t});
    for (const char* p : kPaths) check_mma(w, hand_variants(w, p)[1], c.r);
  }
}

// ---- f16 / bf16 storage ----------------------------------------------------------------------

// MatMul(f16, f16) -> f32 (the mixed-dtype IR rule), f16 -> f16, bf16 -> bf16: operands
// stored as the math type are copied as they are (16-byte cp.async, ldmatrix plain for A's
// rows of k, .trans for B's rows of n); another math path reads them through registers.
TEST(CodegenGemmMma, HalfStorageMatMul) {
  ModelBuilder m;
  m.input("a", {70, 48}).weight("b", {48, 72});
  m.node("MatMul", {"a", "b"}, "y", {70, 72});
  const Workload w32 = m.workload(ClusterKind::gemm);
  for (DType t : {DType::f16, DType::bf16})
    for (DType out : {DType::f32, t}) {
      SCOPED_TRACE(fmt::format("{} -> {}", dtype_name(t), dtype_name(out)));
      const Workload w = retyped(w32, {t, out, out});
      for (const char* p : kPaths)
        for (const auto& v : hand_variants(w, p)) check_mma(w, v, 48);
      // The CUDA-core path reads the halves through ValueEmitter.
      check_mma(w, enumerate_variants(w, a100(), SpaceOptions{{"fp32"}}).front(), 48);
    }
}

TEST(CodegenGemmMma, HalfStorageOddK) {
  // K = 29: no 4-byte vector of halves along k; every operand through registers.
  ModelBuilder m;
  m.input("a", {37, 29}).weight("b", {29, 45});
  m.node("MatMul", {"a", "b"}, "y", {37, 45});
  const Workload w = retyped(m.workload(ClusterKind::gemm), {DType::f16, DType::f16, DType::f16});
  for (const char* p : kPaths) check_mma(w, hand_variants(w, p)[1], 29);
}

TEST(CodegenGemmMma, HalfStorageLinearEpilogue) {
  // Gemm transB (both operands rows of k) + bias + Relu, stored bf16 / f16 throughout: the
  // heavy output is rounded to its storage type before the epilogue reads it.
  for (DType t : {DType::f16, DType::bf16}) {
    ModelBuilder m;
    Attributes at;
    at.set("transB", int64_t{1});
    m.input("x", {40, 64}).weight("w", {48, 64}).weight("bias", {48});
    m.node("Gemm", {"x", "w", "bias"}, "y", {40, 48}, at).node("Relu", {"y"}, "r", {40, 48});
    const Workload w = retyped(m.workload(ClusterKind::gemm), {t, t, t});
    const std::string p = t == DType::f16 ? "fp16" : "bf16";
    for (const auto& v : hand_variants(w, p)) check_mma(w, v, 64);
    auto space = enumerate_variants(w, a100(), SpaceOptions{{p}});
    ASSERT_FALSE(space.empty());
    check_mma(w, space.front(), 64);
  }
}

TEST(CodegenGemmMma, HalfStorageConv) {
  // 1x1 (16-byte copies along the image plane) and 3x3 (the gather through registers).
  for (int64_t k : {1, 3}) {
    ModelBuilder m;
    m.input("x", {2, 32, 8, 8}).weight("w", {24, 32, k, k}).weight("bias", {24});
    m.node("Conv", {"x", "w", "bias"}, "y", {2, 24, 8, 8},
           conv_attrs({k, k}, {1, 1}, {k / 2, k / 2, k / 2, k / 2}, {1, 1}));
    const Workload w = retyped(m.workload(ClusterKind::conv), {DType::f16, DType::f32, DType::f32});
    for (const char* p : kPaths)
      for (const auto& v : hand_variants(w, p)) check_mma(w, v, 32 * k * k);
  }
}

// y = ConvTranspose(x, w, bias): 16 -> 24 channels, stride 2, pads 1, output_padding 1,
// 4x4 -> 8x8 (K = 16 x 9 = 144).
ModelBuilder conv_transpose_16_24() {
  ModelBuilder m;
  m.input("x", {1, 16, 4, 4}).weight("w", {16, 24, 3, 3}).weight("bias", {24});
  Attributes a;
  a.set("strides", std::vector<int64_t>{2, 2});
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.set("output_padding", std::vector<int64_t>{1, 1});
  m.node("ConvTranspose", {"x", "w", "bias"}, "y", {1, 24, 8, 8}, a);
  return m;
}

TEST(CodegenGemmMma, HalfStorageConvTransposeAndResizePrologue) {
  // fp16/bf16 plans store ConvTranspose's operands and a Resize feeding a Conv in the
  // reduced type: every tensor-core path and the fp32 CUDA-core path read them as stored
  // (fp32 math), and round the output once.
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    {  // ConvTranspose 16 -> 24 channels, stride 2, pads 1, output_padding 1, bias, Relu
      ModelBuilder m = conv_transpose_16_24();
      m.node("Relu", {"y"}, "r", {1, 24, 8, 8});
      const Workload w = retyped(m.workload(ClusterKind::conv), {t, t, t});
      for (const char* p : kPaths)
        check_mma(w, mma_variant(w, p, 32, 32, std::string(p) == "tf32" ? 16 : 32, 16, 16, 2), 144);
      const auto fp32 = enumerate_variants(w, a100(), SpaceOptions{{"fp32"}});
      ASSERT_FALSE(fp32.empty());
      check_mma(w, fp32.front(), 144);
      check_mma(w, fp32.back(), 144, false);
    }
    {  // Resize x2 (linear) read through a 3x3 Conv's gather
      ModelBuilder m;
      m.input("x", {1, 16, 5, 4}).weight("w", {16, 16, 3, 3});
      m.g.initializers["scales"] = Tensor::from_vector<float>({4}, {1.f, 1.f, 2.f, 2.f});
      m.g.tensors["scales"] = {DType::f32, {4}};
      Attributes lin;
      lin.set("mode", std::string("linear"));
      m.node("Resize", {"x", "", "scales"}, "u", {1, 16, 10, 8}, lin);
      m.node("Conv", {"u", "w"}, "y", {1, 16, 10, 8}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
      const Workload w = retyped(m.workload(ClusterKind::conv), {t, t, t});
      for (const char* p : kPaths)
        check_mma(w, mma_variant(w, p, 32, 32, std::string(p) == "tf32" ? 16 : 32, 16, 16, 2), 144,
                  true, false);
      const auto fp32 = enumerate_variants(w, a100(), SpaceOptions{{"fp32"}});
      ASSERT_FALSE(fp32.empty());
      check_mma(w, fp32.front(), 144, true, false);
    }
  }
}

// ---- conv_implicit_gemm --------------------------------------------------------------------

TEST(CodegenGemmMma, ConvPointwise) {
  // 1x1 stride 1: A contiguous along the image plane (rows of m), bias.
  ModelBuilder m;
  m.input("x", {2, 32, 6, 6}).weight("w", {24, 32, 1, 1}).weight("bias", {24});
  m.node("Conv", {"x", "w", "bias"}, "y", {2, 24, 6, 6},
         conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}));
  check_paths(m.workload(ClusterKind::conv), 32);
}

TEST(CodegenGemmMma, ConvPointwiseStrided) {
  ModelBuilder m;
  m.input("x", {2, 32, 8, 8}).weight("w", {16, 32, 1, 1});
  m.node("Conv", {"x", "w"}, "y", {2, 16, 4, 4}, conv_attrs({1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}));
  check_paths(m.workload(ClusterKind::conv), 32);
}

TEST(CodegenGemmMma, ConvStridedPadded) {
  ModelBuilder m;
  m.input("x", {2, 16, 9, 9}).weight("w", {20, 16, 3, 3}).weight("bias", {20});
  m.node("Conv", {"x", "w", "bias"}, "y", {2, 20, 5, 5},
         conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}));
  m.node("Relu", {"y"}, "r", {2, 20, 5, 5});
  check_paths(m.workload(ClusterKind::conv), 144);
}

TEST(CodegenGemmMma, ConvDilated) {
  ModelBuilder m;
  m.input("x", {1, 16, 10, 10}).weight("w", {16, 16, 3, 3});
  m.node("Conv", {"x", "w"}, "y", {1, 16, 10, 10}, conv_attrs({3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}));
  check_paths(m.workload(ClusterKind::conv), 144);
}

TEST(CodegenGemmMma, ConvTransposeConv3dConv1d) {
  // One two-stage variant per precision each (the gathers go through registers, like any
  // conv operand with a gather; the shared pipeline is the 2-D conv's, tested above).
  auto each_path = [](const Workload& w, int64_t k) {
    for (const char* p : kPaths)
      check_mma(w, mma_variant(w, p, 32, 32, std::string(p) == "tf32" ? 16 : 32, 16, 16, 2), k);
  };
  {  // ConvTranspose 16 -> 24 channels, stride 2, pads 1, output_padding 1: 4x4 -> 8x8
    ModelBuilder m = conv_transpose_16_24();
    each_path(m.workload(ClusterKind::conv), 144);
  }
  {  // Conv3d 16 -> 16 channels, 3x3x3, pads 1
    ModelBuilder m;
    m.input("x", {1, 16, 3, 4, 5}).weight("w", {16, 16, 3, 3, 3});
    m.node("Conv", {"x", "w"}, "y", {1, 16, 3, 4, 5},
           conv_attrs({3, 3, 3}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}));
    each_path(m.workload(ClusterKind::conv), 432);
  }
  {  // Conv1d 16 -> 32 channels, kernel 5, stride 2, pads 2: 40 -> 20
    ModelBuilder m;
    m.input("x", {2, 16, 40}).weight("w", {32, 16, 5}).weight("bias", {32});
    m.node("Conv", {"x", "w", "bias"}, "y", {2, 32, 20}, conv_attrs({5}, {2}, {2, 2}, {1}));
    each_path(m.workload(ClusterKind::conv), 80);
  }
}

TEST(CodegenGemmMma, ConvGrouped) {
  // Two groups of 16 input channels: the GEMM batch.
  ModelBuilder m;
  m.input("x", {2, 32, 7, 7}).weight("w", {32, 16, 3, 3}).weight("bias", {32});
  m.node("Conv", {"x", "w", "bias"}, "y", {2, 32, 7, 7},
         conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2));
  check_paths(m.workload(ClusterKind::conv), 144);
}

// ---- selection -----------------------------------------------------------------------------

// GEMM/conv clusters of the three models at full size (batch 1).
std::vector<std::pair<std::string, Workload>> model_workloads() {
  std::vector<std::pair<std::string, Workload>> out;
  auto conv = [&](const std::string& name, Shape x, int64_t oc, int64_t k, int64_t stride,
                  int64_t group) {
    ModelBuilder m;
    const int64_t pad = k / 2, oh = (x[2] + 2 * pad - k) / stride + 1;
    m.input("x", x).weight("w", {oc, x[1] / group, k, k}).weight("bias", {oc});
    m.node("Conv", {"x", "w", "bias"}, "y", {x[0], oc, oh, oh},
           conv_attrs({k, k}, {stride, stride}, {pad, pad, pad, pad}, {1, 1}, group));
    m.node("Relu", {"y"}, "r", {x[0], oc, oh, oh});
    out.emplace_back(name, m.workload(ClusterKind::conv));
  };
  conv("resnet conv1 7x7/2", {1, 3, 224, 224}, 64, 7, 2, 1);
  conv("resnet 3x3 64", {1, 64, 56, 56}, 64, 3, 1, 1);
  conv("resnet 1x1 256->64", {1, 256, 56, 56}, 64, 1, 1, 1);
  conv("resnet 3x3/2 512", {1, 256, 14, 14}, 256, 3, 2, 1);
  conv("resnet 1x1 2048->512 7x7", {1, 2048, 7, 7}, 512, 1, 1, 1);
  conv("mobilenet 1x1 32->16", {1, 32, 112, 112}, 16, 1, 1, 1);
  conv("mobilenet 1x1 960->320", {1, 960, 7, 7}, 320, 1, 1, 1);
  auto gemm = [&](const std::string& name, int64_t m_, int64_t k, int64_t n) {
    ModelBuilder m;
    Attributes at;
    at.set("transB", int64_t{1});
    m.input("x", {m_, k}).weight("w", {n, k}).weight("bias", {n});
    m.node("Gemm", {"x", "w", "bias"}, "y", {m_, n}, at);
    out.emplace_back(name, m.workload(ClusterKind::gemm));
  };
  gemm("bert qkv", 128, 768, 768);
  gemm("bert ffn1", 128, 768, 3072);
  gemm("bert ffn2", 128, 3072, 768);
  gemm("resnet fc", 1, 2048, 1000);
  gemm("mobilenet fc", 1, 1280, 1000);
  {
    ModelBuilder m;
    m.input("q", {1, 12, 128, 64}).input("kt", {1, 12, 64, 128});
    m.node("MatMul", {"q", "kt"}, "s", {1, 12, 128, 128});
    out.emplace_back("bert scores", m.workload(ClusterKind::gemm));
  }
  return out;
}

TEST(CodegenGemmMma, TensorCoreVariantsRankFirst) {
  // With fp16 (and the fp32 fallback) enabled on the H100, every model GEMM/conv keeps
  // tensor-core variants in its pruned top-K and ranks one first.
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& h100 = catalog.require("h100");
  for (const char* p : kPaths)
    for (const auto& [name, w] : model_workloads()) {
      SCOPED_TRACE(fmt::format("{} {}", p, name));
      const auto scored = score_variants(w, h100, {}, SpaceOptions{{std::string(p), std::string("fp32")}});
      const auto kept = prune(scored, PruneOptions{});
      ASSERT_FALSE(kept.empty());
      EXPECT_EQ(kept.front().variant.precision, p) << kept.front().variant.key();
      const auto tc = std::count_if(kept.begin(), kept.end(), [&](const ScoredVariant& v) {
        return v.variant.precision == p;
      });
      EXPECT_GE(tc, 1);
    }
}

// ---- shared-memory layouts -----------------------------------------------------------------

// Bank (4-byte word mod 32) conflicts of the fragment reads the template emits, per shared
// request: ldmatrix reads 8 rows of 16 bytes per matrix (a conflict-free phase needs the 8
// rows in 8 different 16-byte bank groups); tf32 reads one 32-bit word per lane per
// register (32 different banks). Mirrors mma_fragment_code's addresses.
int fragment_conflicts(const std::string& precision, bool k_rows, int64_t tile, int64_t bk,
                       int64_t pad) {
  const int64_t ld = (k_rows ? bk : tile) + pad;
  int conflicts = 0;
  for (int64_t f0 = 0; f0 + 16 <= tile; f0 += 16)  // fragment's first row (m or n)
    for (int64_t kk = 0; kk < bk; kk += precision == "tf32" ? 8 : 16) {
      if (precision == "tf32") {
        // Registers: A (row g / g+8, k t / t+4); B reads the same rows/k pattern.
        for (int64_t dr : {0, 8})
          for (int64_t dk : {0, 4}) {
            std::set<int64_t> banks;
            for (int lane = 0; lane < 32; ++lane) {
              const int64_t row = f0 + lane / 4 + dr, k = kk + lane % 4 + dk;
              const int64_t word = k_rows ? row * ld + k : k * ld + row;
              banks.insert(word % 32);
            }
            conflicts += 32 - static_cast<int>(banks.size());
          }
      } else {
        for (int j = 0; j < 4; ++j) {  // one 8x8 matrix per phase
          std::set<int64_t> groups;
          for (int r = 0; r < 8; ++r) {
            const int64_t row = f0 + (j & 1) * 8 + (k_rows ? r : 0);
            const int64_t k = kk + (j >> 1) * 8 + (k_rows ? 0 : r);
            const int64_t elem = k_rows ? row * ld + k : k * ld + row;
            EXPECT_EQ(elem * 2 % 16, 0) << "ldmatrix row not 16-byte aligned";
            groups.insert(elem * 2 / 16 % 8);
          }
          conflicts += 8 - static_cast<int>(groups.size());
        }
      }
    }
  return conflicts;
}

TEST(CodegenGemmMma, SharedLayoutsAreConflictFree) {
  for (const char* p : kPaths)
    for (bool k_rows : {true, false})
      for (int64_t tile : {16, 32, 64, 128, 256})
        for (int64_t bk : {16, 32, 64}) {
          SCOPED_TRACE(fmt::format("{} k_rows {} tile {} bk {}", p, k_rows, tile, bk));
          EXPECT_EQ(fragment_conflicts(p, k_rows, tile, bk, gemm_mma_pad_elems(p, k_rows)), 0);
          const int64_t elem = std::string(p) == "tf32" ? 4 : 2;
          EXPECT_EQ(gemm_mma_pad_elems(p, k_rows) * elem % 16, 0) << "rows must stay 16-byte aligned";
        }
  // The check can fail: unpadded power-of-two rows conflict.
  EXPECT_GT(fragment_conflicts("fp16", true, 64, 64, 0), 0);
  EXPECT_GT(fragment_conflicts("tf32", false, 64, 32, 0), 0);
  EXPECT_GT(fragment_conflicts("tf32", false, 64, 32, 4), 0);  // 16 bytes is not enough there
}

}  // namespace
}  // namespace dc
