// The candidate generator: which groups of nodes may share one GPU kernel. Every candidate
// is a legal cluster (no intermediate it hides is read outside it); every node has at least
// its singleton. Plan selection later picks the cover of the graph with the least time.
// Rules and bounds: docs/candidates.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_traits.h"
#include "ir/workload.h"

namespace dc {

// How an op can take part in fusion: its OpClass in the op-traits table (ir/op_traits.h).
OpClass classify_op(const Node& n);

// The cluster kind of a heavy op alone: conv (group 1, including 1x1 convolutions),
// depthwise (group > 1), gemm (MatMul, Gemm).
ClusterKind heavy_kind(const Node& n);

struct Candidate {
  std::vector<size_t> nodes;  // sorted node indices into g.nodes
  ClusterKind kind = ClusterKind::opaque;
  std::string pattern;        // op names in node order, e.g. "conv+add+relu"
  bool free_view = false;     // the plan makes it views, no kernel (plan_views.h is_free_view)
};

// Bounds of the generator (see docs/candidates.md).
inline constexpr size_t kMaxEpilogue = 6;             // ops after a heavy op
inline constexpr size_t kMaxReductionPrologue = 3;    // elementwise ops before a reduction
inline constexpr size_t kMaxReductionEpilogue = 2;    // elementwise ops after a reduction
inline constexpr size_t kMaxRowEpilogue = 8;          // ops of the DAG over a reduction's result
inline constexpr size_t kMaxRowEpilogueSpan = 16;     // ... that many nodes after it at most
inline constexpr size_t kMaxAllSubchainsLength = 8;   // longer chains: prefixes and suffixes only
inline constexpr size_t kMaxOperandCone = 48;         // injective nodes computing attention's Q, K, V

// A cluster is legal if it is non-empty, every tensor it both produces and reads (an
// intermediate it hides) is read by no node outside it and is not a graph output, and it is
// convex: no path leaves it and comes back (the fused graph would have a cycle).
// `nodes`: indices into g.nodes, any order, no duplicates.
bool is_legal(const Graph& g, const std::vector<size_t>& nodes);

// All candidate clusters of `g` (nodes in topological order, as import/simplify leave them):
// singletons first in node order, then heavy ops with epilogue prefixes and prologues,
// attention, reductions with neighbours, elementwise chains. Legal and without duplicates.
std::vector<Candidate> generate_candidates(const Graph& g);
// The same, with one line per attention site left unfused, naming the node that broke the
// match (`plan --explain`).
std::vector<Candidate> generate_candidates(const Graph& g, std::vector<std::string>* notes);

// Candidates grouped by workload signature: identical clusters share one Workload.
struct WorkloadSet {
  std::vector<Workload> workloads;         // first instance of each signature, in order
  std::vector<size_t> candidate_workload;  // per candidate, index into workloads
};

WorkloadSet dedupe_workloads(const Graph& g, const std::vector<Candidate>& candidates);

}  // namespace dc
