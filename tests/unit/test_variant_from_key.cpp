// Variant::from_key (codegen/variant_from_key.cpp) and the typed family parameters
// (codegen/variant_params.h): every enumerated variant of the test models and of one
// workload per family comes back from its key with every field equal on every GPU type;
// resources of two keys written out by hand; malformed and foreign keys refused with the
// reason; a parameter name a family does not have is a programming error.
#include <map>
#include <set>

#include "candidates.h"
#include "estimator_testing.h"
#include "gpu/gpu_catalog.h"
#include "onnx/import.h"
#include "param_space.h"
#include "param_space_point.h"
#include "passes/simplify.h"
#include "testing.h"
#include "variant.h"
#include "variant_params.h"

namespace dc {
namespace {

using namespace dc::testing;

std::vector<Workload> model_workloads(const std::string& example) {
  const Graph g = simplify(import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + example + "/model.onnx"));
  return dedupe_workloads(g, generate_candidates(g)).workloads;
}

// One workload of each family and path the spaces distinguish (zoo-like shapes: a
// projection, a classifier GEMV with split-K, 3x3 / 1x1 / grouped / depthwise convolutions,
// BERT-like attention, softmax, LayerNorm, a vectorisable add, global pooling).
std::vector<Workload> fixture_workloads() {
  return {
      matmul_2d(1024, 768, 3072),
      matmul_2d(1, 2048, 1000),
      conv2d(1, 64, 56, 56, 64, 3, 1, 1),
      conv2d(1, 64, 56, 56, 256, 1, 1, 0),
      conv2d(1, 64, 28, 28, 128, 3, 1, 1, 4),
      conv2d(1, 32, 112, 112, 32, 3, 1, 1, 32, ClusterKind::depthwise),
      attention(1, 12, 128, 64),
      softmax_2d(12 * 128, 128),
      layernorm_2d(128, 768),
      add_1d(1 << 20),
      global_avg_pool(1, 2048, 7, 7),
  };
}

TEST(VariantFromKey, EveryEnumeratedVariantComesBackWithEveryField) {
  std::vector<Workload> ws = fixture_workloads();
  for (const char* model : {"tiny_cnn", "tiny_transformer"})
    for (auto& w : model_workloads(model)) ws.push_back(std::move(w));
  std::map<std::string, int64_t> per_template;  // variants checked per template/precision
  std::set<std::string> gpus;
  const GpuCatalog catalog = GpuCatalog::builtin();
  for (const GpuSpec& gpu : catalog.all()) {
    for (const Workload& w : ws) {
      for (const Variant& v : enumerate_variants(w, gpu)) {
        std::string why;
        const std::optional<Variant> back = Variant::from_key(v.key(), w, gpu, &why);
        ASSERT_TRUE(back) << v.key() << " on " << gpu.name << ": " << why;
        // Field by field first, so that a failure names the field.
        ASSERT_EQ(back->threads_per_block, v.threads_per_block) << v.key() << " on " << gpu.name;
        ASSERT_EQ(back->smem_bytes, v.smem_bytes) << v.key() << " on " << gpu.name;
        ASSERT_EQ(back->regs_per_thread, v.regs_per_thread) << v.key() << " on " << gpu.name;
        ASSERT_EQ(back->grid_blocks, v.grid_blocks) << v.key() << " on " << gpu.name;
        ASSERT_TRUE(*back == v) << v.key() << " on " << gpu.name;
        ++per_template[v.template_name + "/" + v.precision + (v.params.count("m8n8k4") ? "/m8n8k4" : "")];
        gpus.insert(gpu.name);
      }
    }
  }
  // Every family and path was exercised, on more than one GPU generation.
  for (const char* t : {"gemm_tiled/fp32", "gemm_tiled/tf32", "gemm_tiled/fp16", "gemm_tiled/bf16",
                        "gemm_tiled/fp16/m8n8k4", "conv_implicit_gemm/fp32", "conv_implicit_gemm/fp16",
                        "depthwise_direct/fp32", "attention_fused/fp32", "attention_fused/tf32",
                        "attention_fused/fp16/m8n8k4", "row_reduce/fp32", "elementwise/fp32", "pool_window/fp32"})
    EXPECT_GT(per_template[t], 0) << t;
  EXPECT_GE(gpus.size(), 3u);
}

// The CUDA-core GEMM of a 1024x768 . 768x3072 projection on an H100, a 64x64 block of 4x4
// thread tiles: (64/4)^2 = 256 threads; two stages of a 16-deep A and B tile, each row
// padded by 16 bytes: 2 * 16 * ((64 + 64) * 4 + 2 * 16) = 17408 bytes; 1024/64 * 3072/64 =
// 768 blocks.
TEST(VariantFromKey, RecomputesTheResourcesOfAGemmKey) {
  const GpuSpec h100 = spec_h100();
  const std::string key =
      "gemm_tiled/fp32/block_k=16,block_m=64,block_n=64,split_k=1,stages=2,thread_m=4,thread_n=4,vec=4,"
      "warp_m=16,warp_n=32";
  std::string why;
  const auto v = Variant::from_key(key, matmul_2d(1024, 768, 3072), h100, &why);
  ASSERT_TRUE(v) << why;
  EXPECT_EQ(v->key(), key);
  EXPECT_EQ(v->threads_per_block, 256);
  EXPECT_EQ(v->smem_bytes, 17408);
  EXPECT_EQ(v->grid_blocks, 768);
  EXPECT_GT(v->regs_per_thread, 16 + 23);  // at least the 4x4 accumulators and the fit's constant
  const GemmParams p = GemmParams::of(*v);
  EXPECT_EQ(p.block_m, 64);
  EXPECT_EQ(p.thread_n, 4);
  EXPECT_EQ(p.warp_n, 32);
  EXPECT_EQ(p.stages, 2);
}

// Softmax over 1536 rows of 128: one warp a row, 4 rows a block, rows kept in shared memory:
// 128 threads, 4 * 128 * 4 bytes of rows (no block-wide scratch with one warp a row),
// 24 + 2 * vec registers, 1536 / 4 blocks.
TEST(VariantFromKey, RecomputesTheResourcesOfAReductionKey) {
  std::string why;
  const auto v = Variant::from_key("row_reduce/fp32/cache=2,rows_per_block=4,threads_per_row=32,vec=4",
                                   softmax_2d(1536, 128), spec_a100(), &why);
  ASSERT_TRUE(v) << why;
  EXPECT_EQ(v->threads_per_block, 128);
  EXPECT_EQ(v->smem_bytes, 2048);
  EXPECT_EQ(v->regs_per_thread, 32);
  EXPECT_EQ(v->grid_blocks, 384);
}

// Refused, with a reason containing `expect`.
void expect_refused(const std::string& key, const Workload& w, const GpuSpec& gpu, const std::string& expect) {
  std::string why;
  const auto v = Variant::from_key(key, w, gpu, &why);
  EXPECT_FALSE(v) << key << " came back as " << (v ? v->key() : "");
  EXPECT_NE(why.find(expect), std::string::npos) << key << ": " << why;
}

TEST(VariantFromKey, RefusesMalformedForeignAndImpossibleKeys) {
  const GpuSpec h100 = spec_h100();
  const Workload mm = matmul_2d(1024, 768, 3072);
  const std::string good_params =
      "block_k=16,block_m=64,block_n=64,split_k=1,stages=2,thread_m=4,thread_n=4,vec=4,warp_m=16,warp_n=32";
  ASSERT_TRUE(Variant::from_key("gemm_tiled/fp32/" + good_params, mm, h100));
  expect_refused("gemm_tiled", mm, h100, "malformed");
  expect_refused("gemm_tiled/fp32", mm, h100, "malformed");
  expect_refused("gemm_tiled//" + good_params, mm, h100, "malformed");
  expect_refused("gemm_tiled/fp32/block_m", mm, h100, "malformed");
  expect_refused("gemm_tiled/fp32/" + good_params + ",", mm, h100, "malformed");
  expect_refused("gemm_tiled/fp32/block_k=1x6", mm, h100, "not an integer");
  expect_refused("gemm_tiled/fp32/block_k=16,block_k=16", mm, h100, "twice");
  expect_refused("gemm_tiles/fp32/" + good_params, mm, h100, "unknown template 'gemm_tiles'");
  expect_refused("reference/fp32/", mm, h100, "unknown template 'reference'");
  expect_refused("row_reduce/fp32/cache=0,rows_per_block=1,threads_per_row=32,vec=1", mm, h100,
                 "is computed by gemm_tiled, not row_reduce");
  expect_refused("gemm_tiled/fp8/" + good_params, mm, h100, "unknown precision 'fp8'");
  // A typo, a parameter missing, one of the other path.
  std::string typo = "gemm_tiled/fp32/" + good_params;
  typo.replace(typo.find("block_m"), 7, "blok_m");
  expect_refused(typo, mm, h100, "has no parameter 'blok_m'");
  expect_refused("gemm_tiled/fp32/block_k=16,block_m=64,block_n=64,stages=2,thread_m=4,thread_n=4,vec=4,warp_m=16,"
                 "warp_n=32",
                 mm, h100, "missing parameter 'split_k'");
  expect_refused("gemm_tiled/tf32/" + good_params, mm, h100, "parameter 'thread_m' is not one of gemm_tiled/tf32's");
  // Not a point of the space: a tile it does not offer, a vector width the tiles do not
  // load, a thread tile that is not near-square, a non-canonical number.
  std::string odd = "gemm_tiled/fp32/" + good_params;
  odd.replace(odd.find("block_m=64"), 10, "block_m=48");
  expect_refused(odd, mm, h100, "block_m=48 is not one of this workload's choices");
  std::string narrow = "gemm_tiled/fp32/" + good_params;
  narrow.replace(narrow.find("vec=4"), 5, "vec=2");
  expect_refused(narrow, mm, h100, "vec=2, but these tiles load vectors of 4");
  expect_refused("gemm_tiled/fp32/block_k=16,block_m=64,block_n=64,split_k=1,stages=2,thread_m=2,thread_n=8,vec=4,"
                 "warp_m=8,warp_n=64",
                 mm, h100, "not near-square");
  std::string padded = "gemm_tiled/fp32/" + good_params;
  padded.replace(padded.find("block_m=64"), 10, "block_m=064");
  expect_refused(padded, mm, h100, "not canonical");
  // Paths the GPU lacks: bf16 before sm_80, three cp.async stages on a V100.
  const GpuSpec v100 = GpuCatalog::builtin().require("v100");
  expect_refused("gemm_tiled/bf16/block_k=16,block_m=64,block_n=64,split_k=1,stages=2,vec=4,warp_m=32,warp_n=32", mm,
                 v100, "no bf16 path on sm_70");
  std::string three = "gemm_tiled/fp32/" + good_params;
  three.replace(three.find("stages=2"), 8, "stages=3");
  expect_refused(three, mm, v100, "stages=3 is not one of");
  // Offered, but the GPU cannot run it: rows of 65536 floats kept in shared memory.
  expect_refused("row_reduce/fp32/cache=2,rows_per_block=1,threads_per_row=1024,vec=4", softmax_2d(4, 65536), h100,
                 "shared memory");
}

// Variant::param refuses a parameter the variant does not carry (a typo, or the family's
// own name left out); param_or gives the default for a family's name the variant lacks and
// refuses a name no family has; a family's typed read (::of) also refuses a name of another
// family in the variant's map.
TEST(VariantParams, AParameterNameTheFamilyLacksIsAProgrammingError) {
  Variant v;
  v.template_name = "gemm_tiled";
  v.params = {{"block_m", 64}, {"block_n", 32}};
  EXPECT_EQ(v.param("block_m"), 64);
  EXPECT_EQ(v.param_or("split_k", 1), 1);  // the family's, not carried: the default
  EXPECT_THROW(v.param("blockm"), InternalError);
  EXPECT_THROW(v.param("split_k"), InternalError);  // the family's, but not carried
  EXPECT_THROW(v.param_or("split_kk", 1), InternalError);
  v.params["threads_per_row"] = 32;  // row_reduce's
  EXPECT_THROW(GemmParams::of(v), InternalError);
  v.params.erase("threads_per_row");
  v.params["blok_k"] = 16;
  EXPECT_THROW(GemmParams::of(v), InternalError);
  Variant r;
  r.template_name = "row_reduce";
  r.params = {{"threads_per_row", 64}};
  const ReductionParams rp = ReductionParams::of(r);
  EXPECT_EQ(rp.threads_per_row, 64);
  EXPECT_EQ(rp.rows_per_block, 1);  // absent: the template's default
  EXPECT_THROW(reference_variant().param_or("vek", 1), InternalError);
  EXPECT_EQ(reference_variant().param_or("vec", 1), 1);
}

// The tensor-core attention path defaults to two stages when a hand-made variant leaves them
// out, the CUDA-core path to one (what the templates did with param(name, default)).
TEST(VariantParams, AttentionStagesDefaultByPath) {
  Variant v;
  v.template_name = "attention_fused";
  v.precision = "fp16";
  EXPECT_EQ(AttentionParams::of(v).stages, 2);
  EXPECT_EQ(AttentionParams::of(v).warp_m, 16);
  v.precision = "fp32";
  EXPECT_EQ(AttentionParams::of(v).stages, 1);
}

}  // namespace
}  // namespace dc
