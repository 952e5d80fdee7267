// Candidates and workload dedupe on the exported models (ResNet-50, MobileNetV2, BERT-base).
// The models are not committed: DC_MODELS_DIR names the folder holding
// {resnet50,mobilenetv2,bert_base}/model.onnx. A missing folder or model is a failure, not
// a skip: these tests exist to run on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "candidates.h"
#include "onnx/import.h"
#include "passes/simplify.h"

namespace dc {
namespace {

void load_model(const std::string& name, Graph* out) {
  const char* dir = std::getenv("DC_MODELS_DIR");
  ASSERT_NE(dir, nullptr) << "DC_MODELS_DIR is not set: it must name the folder of the "
                             "exported models (scripts export them into models/)";
  const std::string path = std::string(dir) + "/" + name + "/model.onnx";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing";
  *out = simplify(import_onnx_file(path));
}

struct ModelRun {
  std::vector<Candidate> candidates;
  WorkloadSet workloads;
  std::map<std::string, int> patterns;  // "kind pattern" -> count
};

ModelRun run(const Graph& g, const std::string& name) {
  const auto t0 = std::chrono::steady_clock::now();
  ModelRun r;
  r.candidates = generate_candidates(g);
  r.workloads = dedupe_workloads(g, r.candidates);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& c : r.candidates)
    ++r.patterns[std::string(cluster_kind_name(c.kind)) + " " + c.pattern];
  std::cout << name << ": " << g.nodes.size() << " nodes, " << r.candidates.size()
            << " candidates, " << r.workloads.workloads.size() << " workloads (" << ms
            << " ms)\n";
  return r;
}

void expect_well_formed(const Graph& g, const std::vector<Candidate>& cands) {
  std::set<std::vector<size_t>> sets;
  std::vector<bool> singleton(g.nodes.size(), false);
  for (const auto& c : cands) {
    EXPECT_TRUE(sets.insert(c.nodes).second) << "duplicate " << c.pattern;
    EXPECT_TRUE(is_legal(g, c.nodes)) << c.pattern;
    if (c.nodes.size() == 1) singleton[c.nodes[0]] = true;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) EXPECT_TRUE(singleton[i]) << "node " << i;
}

// Distinct convolution configurations, counted from the graph without signatures: input
// and weight types, bias, every attribute.
size_t distinct_conv_configs(const Graph& g, size_t* convs) {
  using Config = std::tuple<Shape, Shape, Shape, DType, bool, std::vector<int64_t>,
                            std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                            int64_t>;
  std::set<Config> configs;
  *convs = 0;
  for (const auto& n : g.nodes) {
    if (n.op != "Conv") continue;
    ++*convs;
    configs.insert({g.info(n.input(0)).shape, g.info(n.input(1)).shape,
                    g.info(n.outputs[0]).shape, g.info(n.input(0)).dtype, n.has_input(2),
                    n.attrs.get_ints("strides", {}), n.attrs.get_ints("pads", {}),
                    n.attrs.get_ints("dilations", {}), n.attrs.get_ints("kernel_shape", {}),
                    n.attrs.get_int("group", 1)});
  }
  return configs.size();
}

// Workloads of the singleton Conv candidates.
size_t distinct_conv_workloads(const Graph& g, const ModelRun& r) {
  std::set<size_t> ws;
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    if (c.nodes.size() == 1 && g.nodes[c.nodes[0]].op == "Conv")
      ws.insert(r.workloads.candidate_workload[i]);
  }
  return ws.size();
}

// All candidates with this pattern share one workload.
void expect_one_workload(const ModelRun& r, ClusterKind kind, const std::string& pattern) {
  std::set<size_t> ws;
  for (size_t i = 0; i < r.candidates.size(); ++i)
    if (r.candidates[i].kind == kind && r.candidates[i].pattern == pattern)
      ws.insert(r.workloads.candidate_workload[i]);
  EXPECT_EQ(ws.size(), 1u) << pattern;
}

TEST(CandidatesModels, ResNet50ConvolutionsCollapse) {
  Graph g;
  ASSERT_NO_FATAL_FAILURE(load_model("resnet50", &g));
  const ModelRun r = run(g, "resnet50");
  expect_well_formed(g, r.candidates);
  size_t convs = 0;
  const size_t configs = distinct_conv_configs(g, &convs);
  const size_t conv_workloads = distinct_conv_workloads(g, r);
  std::cout << "resnet50: " << convs << " convolutions, " << configs << " configurations, "
            << conv_workloads << " conv workloads\n";
  EXPECT_EQ(convs, 53u);
  EXPECT_EQ(conv_workloads, configs);
  EXPECT_LT(conv_workloads, 30u);
  // 16 bottlenecks: the last conv of each (16) and the 4 downsample convs feed the
  // residual Add; the other 33 convs feed a Relu directly.
  EXPECT_EQ(r.patterns.at("conv conv+relu"), 33);
  EXPECT_EQ(r.patterns.at("conv conv+add"), 20);
  EXPECT_EQ(r.patterns.at("conv conv+add+relu"), 20);
  EXPECT_LT(r.workloads.workloads.size(), r.candidates.size() / 2);
}

TEST(CandidatesModels, MobileNetV2) {
  Graph g;
  ASSERT_NO_FATAL_FAILURE(load_model("mobilenetv2", &g));
  const ModelRun r = run(g, "mobilenetv2");
  expect_well_formed(g, r.candidates);
  size_t convs = 0;
  const size_t configs = distinct_conv_configs(g, &convs);
  const size_t conv_workloads = distinct_conv_workloads(g, r);
  std::cout << "mobilenetv2: " << convs << " convolutions, " << configs << " configurations, "
            << conv_workloads << " conv workloads\n";
  EXPECT_EQ(conv_workloads, configs);
  EXPECT_EQ(r.patterns.at("depthwise conv"), 17);        // one per inverted residual block
  EXPECT_EQ(r.patterns.at("depthwise conv+clip"), 17);   // ReLU6 exported as Clip
  EXPECT_EQ(r.patterns.at("conv conv+add"), 10);         // the 10 residual connections
}

TEST(CandidatesModels, BertBase) {
  Graph g;
  ASSERT_NO_FATAL_FAILURE(load_model("bert_base", &g));
  const ModelRun r = run(g, "bert_base");
  expect_well_formed(g, r.candidates);
  // Six attention clusters per layer, identical across layers: the bare one, with the Q/V
  // Transposes, with the output's Transpose, with all three (the kernel absorbs them), and
  // with the operand cones (the slices of the merged Q/K/V projection, the head views, the
  // bias Add) with and without the output's Transpose (docs/candidates.md rule 4).
  int attention = 0;
  for (const auto& c : r.candidates) attention += c.kind == ClusterKind::attention;
  EXPECT_EQ(attention, 6 * 12);
  expect_one_workload(r, ClusterKind::attention, "transpose+matmul+div+add+softmax+matmul");
  EXPECT_EQ(r.patterns.at("gemm matmul+add+gelu"), 12);
  expect_one_workload(r, ClusterKind::gemm, "matmul+add+gelu");
  // Residual Add + LayerNorm twice per layer, and the embedding sum + LayerNorm.
  EXPECT_EQ(r.patterns.at("reduction add+layernorm"), 25);
  EXPECT_EQ(r.patterns.at("reduction div+add+softmax"), 12);
  expect_one_workload(r, ClusterKind::reduction, "div+add+softmax");
  // Twelve identical layers: workloads are a small fraction of the candidates.
  EXPECT_LT(r.workloads.workloads.size() * 8, r.candidates.size());
}

}  // namespace
}  // namespace dc
