// The sm_70 tensor-core path of the GEMM-family templates (codegen/template_gemm_mma.cpp with
// Variant param m8n8k4: mma.sync m8n8k4, no ldmatrix, synchronous copies): per edge shape,
// hand-set and enumerated v100 variants run on the host emulator (whose m8n8k4 follows the
// PTX ISA's quad-pair tables) with fresh seeded random inputs and NaN-poisoned outputs,
// compared with the CPU reference at the error model's kernel_tolerance (docs/precision.md),
// as test_codegen_gemm_mma.cpp does for m16n8k16. Each source compiles for sm_70 (NVRTC 12).
// Also: the v100 space offers only fp32 and fp16, and no cp.async ring deeper than 2.
#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "emulator.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
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

const GpuSpec& v100() {
  static const GpuSpec g = GpuCatalog::builtin().require("v100");
  return g;
}

Variant volta_variant(const Workload& w, int64_t bm, int64_t bn, int64_t bk, int64_t wm, int64_t wn,
                      int64_t split = 1) {
  Variant v;
  v.template_name = w.kind == ClusterKind::conv ? "conv_implicit_gemm" : "gemm_tiled";
  v.precision = "fp16";
  v.params = {{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warp_m", wm},   {"warp_n", wn},
              {"vec", 4},      {"stages", 2},   {"split_k", split}, {"m8n8k4", 1}};
  v.threads_per_block = static_cast<int>((bm / wm) * (bn / wn) * 32);
  v.grid_blocks = 1;
  return v;
}

// 1, 2 and 4 warps; warp tiles of 1x1 up to 2x2 m16n16 fragments; K tiles of 1 to 4 k4 groups of 4.
std::vector<Variant> hand_variants(const Workload& w) {
  return {volta_variant(w, 16, 16, 16, 16, 16), volta_variant(w, 32, 32, 32, 16, 16),
          volta_variant(w, 64, 32, 16, 32, 32), volta_variant(w, 32, 64, 32, 32, 32)};
}

uint32_t next_seed() {
  static uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  return seed++;
}

// Inputs rounded to f16 (the reference multiplies what the tensor cores multiply), outputs
// poisoned; compared at kernel_tolerance("fp16", f16 operands, ...).
void check(const Workload& w, const Variant& v, int64_t k, bool nvrtc = true, bool exact_operands = true) {
  const uint32_t seed0 = next_seed();
  SCOPED_TRACE(fmt::format("{} (input seed {})", v.key(), seed0));
  GeneratedKernel kern;
  ASSERT_NO_THROW(kern = generate_kernel(w, v));
  // The kernel after the prelude (which defines every instruction) calls m8n8k4, no ldmatrix.
  const size_t body = kern.source.find("---- end of prelude");
  ASSERT_NE(body, std::string::npos);
  ASSERT_NE(kern.source.find("dc_mma_m8n8k4_f16(", body), std::string::npos);
  ASSERT_EQ(kern.source.find("dc_ldmatrix", body), std::string::npos);
  std::vector<Tensor> buffers(kern.buffers.size());
  ref::TensorMap inputs;
  uint32_t seed = seed0;
  for (size_t i = 0; i < kern.buffers.size(); ++i) {
    const KernelBuffer& b = kern.buffers[i];
    if (b.role == BufferRole::input) {
      Tensor t = random_tensor(b.shape, seed++);
      float* p = t.mutable_data<float>();
      for (int64_t e = 0; e < t.numel(); ++e) p[e] = half_to_float(float_to_half(p[e]));
      buffers[i] = ref::convert_float(t, b.dtype);
      inputs[b.name] = buffers[i];
    } else {
      Tensor t(DType::f32, b.shape);
      std::fill_n(t.mutable_data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
      buffers[i] = ref::convert_float(t, b.dtype);
    }
  }
  std::future<CompileResult> compiled;
  if (nvrtc) compiled = std::async(std::launch::async, [&kern] { return compile_cuda(kern.source, "sm_70"); });
  const EmulatorResult r = emulate(kern, buffers);
  if (nvrtc) {
    const CompileResult cr = compiled.get();
    EXPECT_TRUE(cr.ok) << cr.error << "\n" << cr.log;
    EXPECT_EQ(cr.nvrtc_version.substr(0, 3), "12.");
  }
  ASSERT_TRUE(r.ok) << r.error << "\n" << kern.source;
  const auto expected = ref::run_graph(w.graph, inputs);
  const DType stored = kern.buffers.empty() ? DType::f32 : kern.buffers.front().dtype;
  const DType operands = !exact_operands ? DType::f32 : stored != DType::f32 ? stored : DType::f16;
  for (size_t i = 0; i < kern.buffers.size(); ++i) {
    if (kern.buffers[i].role != BufferRole::output) continue;
    const Tolerance tol = kernel_tolerance("fp16", operands, kern.buffers[i].dtype, k);
    const ref::Comparison c = ref::compare_tensors(buffers[i], expected.at(kern.buffers[i].name), tol.rtol, tol.atol);
    EXPECT_TRUE(c.pass) << kern.buffers[i].name << ": rel L2 " << c.rel_l2_error << ", max abs " << c.max_abs_error
                        << " (rtol " << tol.rtol << ") " << c.problem;
  }
}

// Hand-set variants plus the first and last enumerated v100 fp16 variants.
void check_all(const Workload& w, int64_t k, bool exact_operands = true) {
  for (const auto& v : hand_variants(w)) check(w, v, k, true, exact_operands);
  const auto space = enumerate_variants(w, v100(), SpaceOptions{{"fp16"}});
  ASSERT_FALSE(space.empty());
  check(w, space.front(), k, true, exact_operands);
  check(w, space.back(), k, false, exact_operands);
}

Attributes conv_attrs(int64_t k, int64_t stride, int64_t pad) {
  Attributes a;
  a.set("kernel_shape", std::vector<int64_t>{k, k});
  a.set("strides", std::vector<int64_t>{stride, stride});
  a.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  a.set("dilations", std::vector<int64_t>{1, 1});
  a.set("group", int64_t{1});
  return a;
}

TEST(CodegenGemmMma884, MatMulOddSizes) {
  ModelBuilder m;
  m.input("a", {37, 29}).weight("b", {29, 45});
  m.node("MatMul", {"a", "b"}, "y", {37, 45});
  check_all(m.workload(ClusterKind::gemm), 29);
}

TEST(CodegenGemmMma884, MatMulKSmallerThanBlockK) {
  ModelBuilder m;
  m.input("a", {20, 8}).weight("b", {8, 24});
  m.node("MatMul", {"a", "b"}, "y", {20, 24});
  check_all(m.workload(ClusterKind::gemm), 8);
}

TEST(CodegenGemmMma884, GemmTransposes) {
  // A and B each as rows of k or rows of m/n in shared memory: both pair reads of each operand.
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
      const Workload w = m.workload(ClusterKind::gemm);
      const auto hand = hand_variants(w);
      check(w, hand[1], 40);  // 4 warps of 1x1 fragments
      check(w, hand[3], 40);  // 2 warps of 2x2 fragments
    }
}

TEST(CodegenGemmMma884, SwappedTransposeOperands) {
  // MatMul operands read in place through a Transpose swapping their last two dims
  // (swapped_matmul_testing.h): the same shared layouts as Gemm's transA/transB above.
  for (const auto& c : testing::kSwappedCases) {
    SCOPED_TRACE(c.name);
    const Workload w = testing::swapped_matmul(c);
    const auto hand = hand_variants(w);
    check(w, hand[1], c.a.back());
    check(w, hand[3], c.a.back());
  }
}

TEST(CodegenGemmMma884, EpilogueAndSplitK) {
  ModelBuilder m;
  m.input("a", {24, 512}).weight("b", {512, 40}).weight("bias", {40});
  m.node("MatMul", {"a", "b"}, "y", {24, 40}).node("Add", {"y", "bias"}, "z", {24, 40});
  m.node("Relu", {"z"}, "r", {24, 40});
  const Workload w = m.workload(ClusterKind::gemm);
  check(w, volta_variant(w, 32, 32, 32, 16, 16, 4), 512);
  check(w, volta_variant(w, 16, 32, 16, 16, 16, 3), 512);
}

// A Linear layer's weight gradient with its bias gradient (the ones row or column,
// CodegenGemm.OperandSumIsTheBiasGradient) through sm_70's m8n8k4, split-K included.
TEST(CodegenGemmMma884, OperandSumIsTheBiasGradient) {
  for (const auto& c : testing::kOperandSumCases) {
    SCOPED_TRACE(c.name);
    const Workload w = testing::operand_sum_workload(c);
    for (const auto& v : hand_variants(w)) check(w, v, c.r, false);
    check(w, volta_variant(w, 32, 32, 32, 16, 16, 3), c.r);
  }
}

TEST(CodegenGemmMma884, HalfStorageMatMulAndConv) {
  ModelBuilder mm;
  mm.input("a", {70, 48}).weight("b", {48, 72});
  mm.node("MatMul", {"a", "b"}, "y", {70, 72});
  Workload w = mm.workload(ClusterKind::gemm);
  for (const auto& name : w.graph.inputs) w.graph.tensors[name].dtype = DType::f16;
  for (const auto& name : w.graph.outputs) w.graph.tensors[name].dtype = DType::f16;
  for (const auto& v : hand_variants(w)) check(w, v, 48);
  for (int64_t k : {1, 3}) {
    ModelBuilder m;
    m.input("x", {2, 32, 8, 8}).weight("w", {24, 32, k, k}).weight("bias", {24});
    m.node("Conv", {"x", "w", "bias"}, "y", {2, 24, 8, 8}, conv_attrs(k, 1, k / 2));
    Workload c = m.workload(ClusterKind::conv);
    for (const auto& name : c.graph.inputs) c.graph.tensors[name].dtype = DType::f16;
    check_all(c, 32 * k * k);
  }
}

TEST(CodegenGemmMma884, ConvStridedPadded) {
  ModelBuilder m;
  m.input("x", {1, 16, 9, 9}).weight("w", {20, 16, 3, 3});
  m.node("Conv", {"x", "w"}, "y", {1, 20, 5, 5}, conv_attrs(3, 2, 1));
  check_all(m.workload(ClusterKind::conv), 16 * 9);
}

// sm_70: fp32 and fp16 only (no tf32, bf16), fp16 GEMMs through m8n8k4 with a ring of 2
// stages (cp.async is sm_80+); the a100 space never offers m8n8k4.
TEST(CodegenGemmMma884, V100SpaceOffersFp16ThroughM8n8k4Only) {
  ModelBuilder m;
  m.input("a", {128, 256}).weight("b", {256, 128});
  m.node("MatMul", {"a", "b"}, "y", {128, 128});
  const Workload w = m.workload(ClusterKind::gemm);
  const auto space = enumerate_variants(w, v100(), SpaceOptions{{"fp32", "tf32", "fp16", "bf16"}});
  int fp16 = 0;
  for (const auto& v : space) {
    EXPECT_TRUE(v.precision == "fp32" || v.precision == "fp16") << v.key();
    if (v.precision != "fp16") continue;
    ++fp16;
    EXPECT_EQ(v.param_or("m8n8k4", 0), 1) << v.key();
    EXPECT_EQ(v.param_or("stages", 0), 2) << v.key();
  }
  EXPECT_GT(fp16, 0);
  const GpuSpec a100 = GpuCatalog::builtin().require("a100");
  for (const auto& v : enumerate_variants(w, a100, SpaceOptions{{"fp16"}})) EXPECT_EQ(v.param_or("m8n8k4", 0), 0);
  std::string why;
  EXPECT_FALSE(fits_gpu(volta_variant(w, 32, 32, 32, 16, 16), a100, &why));
  EXPECT_NE(why.find("m8n8k4"), std::string::npos) << why;
}

}  // namespace
}  // namespace dc
