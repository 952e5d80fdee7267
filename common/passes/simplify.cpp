#include "passes/simplify.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "passes/eliminate_dead_nodes.h"
#include "passes/fold_batch_norm.h"
#include "passes/fold_constants.h"
#include "passes/fuse_gelu.h"
#include "passes/fuse_layer_norm.h"
#include "passes/fuse_rms_norm.h"
#include "passes/fuse_sibling_matmuls.h"
#include "passes/interleave_glu_weights.h"
#include "passes/lower_einsum.h"
#include "passes/lower_norms.h"
#include "passes/fuse_pad_conv.h"
#include "passes/remove_identity.h"

namespace dc {

namespace {

template <class Pass>
Graph run_pass(const char* name, Graph g, Pass pass) {
  const size_t before = g.nodes.size();
  const auto t0 = std::chrono::steady_clock::now();
  Graph out = pass(std::move(g));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spdlog::debug("pass {:<22} nodes {:>5} -> {:>5}  ({:.1f} ms)", name, before, out.nodes.size(), ms);
  return out;
}

}  // namespace

Graph simplify(Graph g, const SimplifyOptions& opts) {
  g = run_pass("remove_identity", std::move(g), remove_identity);
  g = run_pass("fold_constants", std::move(g), fold_constants);
  g = run_pass("fuse_pad_conv", std::move(g), fuse_pad_conv);
  g = run_pass("eliminate_dead_nodes", std::move(g), eliminate_dead_nodes);
  g = run_pass("lower_norms", std::move(g), lower_norms);
  g = run_pass("lower_einsum", std::move(g), lower_einsum);
  if (opts.fold_batch_norm) g = run_pass("fold_batch_norm", std::move(g), fold_batch_norm);
  if (opts.fuse_layer_norm) g = run_pass("fuse_layer_norm", std::move(g), fuse_layer_norm);
  if (opts.fuse_rms_norm) g = run_pass("fuse_rms_norm", std::move(g), fuse_rms_norm);
  if (opts.fuse_gelu) g = run_pass("fuse_gelu", std::move(g), fuse_gelu);
  if (opts.fuse_sibling_matmuls)
    g = run_pass("fuse_sibling_matmuls", std::move(g), fuse_sibling_matmuls);
  if (opts.interleave_glu_weights)
    g = run_pass("interleave_glu_weights", std::move(g), interleave_glu_weights);
  g = run_pass("eliminate_dead_nodes", std::move(g), eliminate_dead_nodes);
  return g;
}

}  // namespace dc
