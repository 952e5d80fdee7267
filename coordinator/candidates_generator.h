// The candidate generator's rules, shared by the files that define them: candidates.cpp
// (heavy ops with prologues and epilogues, attention, elementwise chains) and
// candidates_reduction.cpp (rule 5: reductions, sibling sums, row-space epilogues, input
// cones). Internal to the coordinator; the interface is candidates.h.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "candidates.h"
#include "passes/match.h"

namespace dc::candidate_rules {

inline bool is_elementwise_math(const Node& n) { return dc::is_elementwise_math(n.op); }


// Graph queries computed once per generator run.
struct Context {
  const Graph& g;
  match::Uses uses;
  std::map<std::string, size_t> producer;

  explicit Context(const Graph& graph) : g(graph), uses(graph) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer[o] = i;
  }

  const Node& node(size_t i) const { return g.nodes[i]; }

  std::optional<size_t> producer_of(const std::string& t) const {
    auto it = producer.find(t);
    if (t.empty() || it == producer.end()) return std::nullopt;
    return it->second;
  }

  // The node's only output, if it has exactly one.
  std::optional<std::string> single_output(size_t i) const {
    std::optional<std::string> out;
    for (const auto& o : node(i).outputs) {
      if (o.empty()) continue;
      if (out) return std::nullopt;
      out = o;
    }
    return out;
  }

  // The one node reading node i's only output, which no one else reads and which is not a
  // graph output: the condition for i's output to become a hidden intermediate.
  std::optional<size_t> sole_next(size_t i) const {
    const auto out = single_output(i);
    if (!out) return std::nullopt;
    return uses.sole_consumer(*out);
  }

  bool is_constant(const std::string& t) const { return g.is_constant(t); }

  const Shape& shape(const std::string& t) const { return g.info(t).shape; }

  // Node j reads chain tensor t and maps it elementwise to a tensor of the same shape.
  bool preserves_shape(size_t j, const std::string& t) const {
    const auto out = single_output(j);
    return out && g.tensors.count(*out) && g.tensors.count(t) && shape(*out) == shape(t);
  }

  // Number of j's input slots holding t.
  size_t uses_of(size_t j, const std::string& t) const {
    const auto& in = node(j).inputs;
    return static_cast<size_t>(std::count(in.begin(), in.end(), t));
  }

  // `exposed`: intermediates the cluster writes as outputs although it also reads them.
  bool is_legal(const std::vector<size_t>& nodes, const std::set<std::string>& exposed = {}) const;
};

class Generator {
 public:
  explicit Generator(const Graph& g) : c_(g) {}

  std::vector<Candidate> run();

 private:
  static ClusterKind singleton_kind(const Node& n);

  void add(std::vector<size_t> nodes, ClusterKind kind, const std::set<std::string>& exposed = {});

  // Epilogue steps after node i, following single-reader outputs: one op each, but for a
  // masking Where, which brings the compare computing its mask (select_epilogue).
  std::vector<std::vector<size_t>> epilogue_chain(size_t i) const;

  // Heavy op alone, with every prefix of its epilogue, and with every non-empty set of its
  // operand prologues combined with every epilogue prefix.
  void heavy(size_t h);

  // A ReduceSum of GEMM h's operand over its k (a Linear layer's or a convolution's bias
  // gradient beside the weight gradient, ir/gemm_operand_sum.h), with the 2-D Transpose it
  // reads through (the operand's prologue), if any. The GEMM computes the sum as a row or
  // column of ones.
  struct OperandSum {
    size_t sum;
    std::optional<size_t> transpose;
  };
  std::vector<OperandSum> operand_sums(size_t h) const;

  // `nodes` (heavy op, prologue `set`, epilogue steps) with each operand sum whose Transpose,
  // if it reads through one, the set holds: the kernel's second output.
  void add_with_sums(const std::vector<size_t>& nodes, const std::vector<size_t>& set,
                     const std::vector<OperandSum>& sums, ClusterKind kind);

  // The Slices and combiner nodes of MatMul h's GLU epilogue, the product's producer last;
  // empty if h has none.
  std::vector<size_t> glu_epilogue(size_t h) const;

  // MatMul(Q, Kt) -> score ops -> Softmax(last axis) -> [Cast, IsNaN/Where guard] ->
  // MatMul(P, V), as one cluster (the score ops: scale, masks, Casts; score_chain). The same
  // cluster is offered again with the Transposes feeding K, Q and V (strided views), with a
  // Transpose of the attention output (stored at the permuted coordinates), and with the
  // operand cones: every injective node computing Q, K or V that only the cluster reads
  // (sqrt(scale) on Q and K, RoPE, the GQA repeat, Reshape/Transpose/Slice views), which the
  // kernel computes as it loads its operands: no copy kernel before or after attention.
  void attention(size_t m2);

  // The Softmax whose probabilities m2 reads as A, directly or through Casts and the guard
  // Where(IsNaN(P), 0, P) (its nodes appended to `post`).
  std::optional<size_t> probabilities_source(size_t m2, std::vector<size_t>& post) const;

  // Walking back from the Softmax to the first MatMul through the score ops: injective math,
  // Casts and Where (its value operands), each keeping the scores' shape; the other operands
  // (masks, position biases, the Where condition) stay outside. Appends the ops and returns
  // the MatMul. At most 8 ops.
  std::optional<size_t> score_chain(size_t softmax, const Shape& scores, std::vector<size_t>& nodes);

  // Some input of node i, through at most `depth` injective ops, is produced by a MatMul.
  bool reaches_matmul(size_t i, size_t depth) const;

  // Injective nodes computing `tensors` that nothing outside `core` and themselves reads:
  // grown backwards to a fixed point, at most kMaxOperandCone nodes.
  std::vector<size_t> operand_cones(const std::vector<size_t>& core, const std::vector<std::string>& tensors) const;

  // Why is_legal refuses `nodes`: the first hidden intermediate read outside, or convexity.
  std::string illegal_reason(const std::vector<size_t>& nodes) const;

  void explain(size_t node, std::string why);

  // A reduction with up to kMaxReductionPrologue elementwise producers before it (following
  // the first input that has one) and kMaxReductionEpilogue elementwise consumers after it.
  void reduction(size_t r);

  // Up to kMaxReductionPrologue elementwise producers of reduction r's data input, each read
  // by the next alone (following the first input that has one), nearest first.
  std::vector<size_t> reduction_prologue(size_t r) const;

  // Sibling sums: reduction r and a later ReduceSum/ReduceMean over the same rows
  // (are_sibling_sums) whose prologue reads a tensor that r's reads too, each with its whole
  // prologue, as one row_reduce kernel that reads the shared tensor once (BatchNorm's
  // backward: sum dY and sum dY x_hat; LayerNorm's: the two row means). Offered beside each
  // reduction's own candidates; the cover chooses.
  void sibling_sums(size_t r);

  // The non-constant tensors that `nodes` read from outside themselves.
  std::set<std::string> tensors_read(const std::vector<size_t>& nodes) const;

  // Reduction r with the elementwise DAG over its result that row_reduce writes as row-space
  // outputs (codegen/template_reduction.cpp): the nodes of the result's shape that read it or
  // another node of the DAG, their other operands constants or free of computed inputs (a
  // running statistic times the momentum, fused as an operand cone when only the DAG reads
  // it). BatchNorm's running statistics and inverse std from the batch mean and variance
  // (lower_batch_norm.h): no kernel of their own. Nodes within kMaxRowEpilogueSpan of r in
  // topological order only: the backward pass's per-channel scalars from invstd belong to the
  // kernels that read them, and a cluster that spans far ties distant parts of the cover
  // together. One candidate per depth of the DAG. `exposed`: the tensors others read too.
  struct RowEpilogue {
    std::vector<size_t> nodes;
    std::set<std::string> exposed;
  };
  std::vector<RowEpilogue> row_epilogues(size_t r) const;

  // Reduction `nodes[0]` with DAG nodes[1..] and the operand cones only they read.
  RowEpilogue row_epilogue(std::vector<size_t> nodes) const;

  // A constant, a graph input, or computed by an elementwise node from those alone.
  bool free_operand(const std::string& t) const;

  // The injective nodes computing reduction r's input, grown backwards like attention's
  // operand cones; the reduction computes its input as it loads the row, and when others read
  // that input too, the kernel writes it as a second output during its first pass, as for
  // the residual Add above. For a norm (`norm`): when one of them is a Gather (the embedding
  // in front of the first norm: the token lookup, with position or token-type Adds and index
  // Reshapes around it; no copy kernel for the lookup remains). For other row reductions:
  // when others read the input (a bias or BatchNorm gradient's ReduceSum of a dY that the
  // data and weight gradients read too, computed by the ReLU's mask or BatchNorm's dX: the
  // chain runs in the reduction's kernel, which writes dY, instead of a kernel of its own).
  void input_cone(size_t r, const std::vector<size_t>& after, bool norm);

  // input_cone's nodes (its producer last), or none.
  std::vector<size_t> input_cone_nodes(size_t r, bool norm) const;

  // Chains of injective ops linked by single-reader outputs (a node with several linked
  // producers continues the chain of the first, by input slot). Every contiguous sub-chain
  // of a chain up to kMaxAllSubchainsLength long; of a longer chain, its prefixes and
  // suffixes only (about 2L instead of L^2/2). Then each maximal chain with its operand
  // cone: the injective nodes computing its operands that only it reads, the branches the
  // linear chain left out (BatchNorm's dX: the x_hat branch and the per-channel scalars
  // beside the dY chain), so a DAG of elementwise ops is one kernel, not one per branch.
  void elementwise_chains();

  Context c_;
  std::set<std::vector<size_t>> seen_;
  std::vector<Candidate> out_;

 public:
  std::vector<std::string> notes_;  // why an attention site was not fused (plan --explain)
};

}  // namespace dc::candidate_rules
