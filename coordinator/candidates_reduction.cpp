// Rule 5 of the candidate generator (docs/candidates.md): a reduction with its elementwise
// neighbours, sibling sums over the same rows, the row-space DAG over its result, and the
// injective cone computing its input.
#include <algorithm>
#include <deque>
#include <map>

#include "candidates_generator.h"
#include "ir/reduced_axes.h"

namespace dc::candidate_rules {

void Generator::reduction(size_t r) {
  const std::vector<size_t> before = reduction_prologue(r);
  std::vector<size_t> after;
  size_t cur = r;
  while (after.size() < kMaxReductionEpilogue) {
    const auto next = c_.sole_next(cur);
    if (!next || !is_elementwise_math(c_.node(*next)) ||
        !c_.preserves_shape(*next, *c_.single_output(cur)))
      break;
    after.push_back(*next);
    cur = *next;
  }
  const std::vector<RowEpilogue> dags = row_epilogues(r);
  for (size_t a = 0; a <= before.size(); ++a) {
    for (size_t b = 0; b <= after.size(); ++b) {
      std::vector<size_t> nodes = {r};
      nodes.insert(nodes.end(), before.begin(), before.begin() + static_cast<long>(a));
      nodes.insert(nodes.end(), after.begin(), after.begin() + static_cast<long>(b));
      add(nodes, ClusterKind::reduction);
    }
    for (const RowEpilogue& dag : dags) {
      std::vector<size_t> nodes = dag.nodes;
      nodes.insert(nodes.end(), before.begin(), before.begin() + static_cast<long>(a));
      add(nodes, ClusterKind::reduction, dag.exposed);
    }
  }
  // The residual Add entering a norm whose sum the next residual also reads: fused, with
  // the sum written as a second output during the norm's first pass over the row.
  const std::string& op = c_.node(r).op;
  const bool norm = op == "LayerNormalization" || op == "RMSNormalization";
  if (!norm) {
    // row_reduce writes an input that others read during its pass (pools have no such output).
    if (op_traits(op).pattern == OpPattern::reduce) input_cone(r, after, false);
    return;
  }
  input_cone(r, after, true);
  const auto p = c_.producer_of(c_.node(r).input(0));
  if (!p || c_.sole_next(*p) || c_.node(*p).op != "Add" || c_.node(*p).inputs.size() != 2) return;
  const std::string& sum = c_.node(r).input(0);
  for (const auto& in : c_.node(*p).inputs)
    if (c_.is_constant(in) || !c_.g.tensors.count(in) || c_.shape(in) != c_.shape(sum)) return;
  for (size_t b = 0; b <= after.size(); ++b) {
    std::vector<size_t> nodes = {*p, r};
    nodes.insert(nodes.end(), after.begin(), after.begin() + static_cast<long>(b));
    add(nodes, ClusterKind::reduction, {sum});
  }
}

std::vector<size_t> Generator::reduction_prologue(size_t r) const {
  std::vector<size_t> before;
  size_t cur = r;
  while (before.size() < kMaxReductionPrologue) {
    std::optional<size_t> next;
    const Node& n = c_.node(cur);
    const size_t slots = cur == r ? 1 : n.inputs.size();  // a reduction's data input only
    for (size_t s = 0; s < slots && s < n.inputs.size() && !next; ++s) {
      const auto p = c_.producer_of(n.inputs[s]);
      // Broadcasting inside the prologue is fine: the reduction reads p's output.
      if (p && is_elementwise_math(c_.node(*p)) && c_.sole_next(*p) == cur) next = p;
    }
    if (!next) break;
    before.push_back(*next);
    cur = *next;
  }
  return before;
}

void Generator::sibling_sums(size_t r) {
  std::vector<size_t> mine = reduction_prologue(r);
  mine.push_back(r);
  const std::set<std::string> reads = tensors_read(mine);
  for (size_t s = r + 1; s < c_.g.nodes.size(); ++s) {
    if (classify_op(c_.node(s)) != OpClass::reduction || !are_sibling_sums(c_.g, c_.node(r), c_.node(s))) continue;
    std::vector<size_t> theirs = reduction_prologue(s);
    theirs.push_back(s);
    const std::set<std::string> other = tensors_read(theirs);
    // Not a statistic of r's (a decomposed LayerNorm's variance reads its mean): one pass
    // computes no value from another reduction of the same pass.
    if (std::any_of(c_.node(r).outputs.begin(), c_.node(r).outputs.end(),
                    [&](const std::string& o) { return other.count(o) != 0; }) ||
        std::none_of(reads.begin(), reads.end(), [&](const std::string& t) { return other.count(t) != 0; }))
      continue;
    std::vector<size_t> nodes = mine;
    nodes.insert(nodes.end(), theirs.begin(), theirs.end());
    add(nodes, ClusterKind::reduction);
    // With the chain computing r's input (the ReLU mask or BatchNorm's dX making dY, as
    // rule 5 offers it for r alone), which the kernel writes in its pass.
    const std::vector<size_t> cone = input_cone_nodes(r, false);
    if (cone.empty()) continue;
    nodes.insert(nodes.end(), cone.begin(), cone.end());
    add(nodes, ClusterKind::reduction, {c_.node(r).input(0)});
  }
}

std::set<std::string> Generator::tensors_read(const std::vector<size_t>& nodes) const {
  const std::set<size_t> inside(nodes.begin(), nodes.end());
  std::set<std::string> reads;
  for (size_t i : nodes)
    for (const auto& in : c_.node(i).inputs) {
      const auto p = c_.producer_of(in);
      if (!in.empty() && !c_.is_constant(in) && !(p && inside.count(*p))) reads.insert(in);
    }
  return reads;
}

std::vector<Generator::RowEpilogue> Generator::row_epilogues(size_t r) const {
  const auto out = c_.single_output(r);
  // Row-space results only: a reduction's, not a norm's or a Softmax's (the input's shape).
  if (!out || c_.shape(*out) == c_.shape(c_.node(r).input(0))) return {};
  std::map<std::string, int> depth = {{*out, 0}};
  std::deque<std::string> todo = {*out};
  std::vector<std::pair<size_t, int>> dag;  // node, depth
  while (!todo.empty() && dag.size() < kMaxRowEpilogue) {
    const std::string t = todo.front();
    todo.pop_front();
    for (size_t u : c_.uses.of(t)) {
      const auto o = c_.single_output(u);
      if (!o || depth.count(*o) || u > r + kMaxRowEpilogueSpan || !is_elementwise_math(c_.node(u)) ||
          !c_.preserves_shape(u, *out))
        continue;
      int d = 0;
      bool ready = true;
      for (const auto& in : c_.node(u).inputs) {
        if (depth.count(in)) d = std::max(d, depth.at(in) + 1);
        else ready = ready && free_operand(in);
      }
      if (!ready) continue;
      dag.emplace_back(u, d);
      depth[*o] = d;
      todo.push_back(*o);
    }
  }
  std::vector<RowEpilogue> out_dags;
  const int deepest = dag.empty() ? 0 : std::max_element(dag.begin(), dag.end(), [](auto& x, auto& y) { return x.second < y.second; })->second;
  for (int k = 1; k <= deepest; ++k) {
    std::vector<size_t> nodes = {r};
    for (const auto& [u, d] : dag)
      if (d <= k) nodes.push_back(u);
    out_dags.push_back(row_epilogue(nodes));
  }
  return out_dags;
}

Generator::RowEpilogue Generator::row_epilogue(std::vector<size_t> nodes) const {
  std::set<std::string> made;
  for (size_t u : nodes) made.insert(c_.node(u).outputs.begin(), c_.node(u).outputs.end());
  std::vector<std::string> operands;
  for (size_t u : nodes)
    for (const auto& in : c_.node(u).inputs)
      if (!in.empty() && !made.count(in) && !c_.is_constant(in)) operands.push_back(in);
  const std::vector<size_t> cones = operand_cones(nodes, operands);
  nodes.insert(nodes.end(), cones.begin(), cones.end());
  RowEpilogue e{nodes, {}};
  const std::set<size_t> inside(nodes.begin(), nodes.end());
  for (const auto& t : made) {
    const auto& readers = c_.uses.of(t);
    if (c_.uses.outputs.count(t) || std::any_of(readers.begin(), readers.end(), [&](size_t u) { return !inside.count(u); }))
      e.exposed.insert(t);
  }
  return e;
}

bool Generator::free_operand(const std::string& t) const {
  if (t.empty() || c_.is_constant(t)) return true;
  const auto p = c_.producer_of(t);
  if (!p) return true;
  const auto& ins = c_.node(*p).inputs;
  return is_elementwise_math(c_.node(*p)) &&
         std::all_of(ins.begin(), ins.end(), [&](const std::string& in) { return in.empty() || c_.is_constant(in) || !c_.producer_of(in); });
}

void Generator::input_cone(size_t r, const std::vector<size_t>& after, bool norm) {
  const std::string& x = c_.node(r).input(0);
  const std::vector<size_t> cone = input_cone_nodes(r, norm);
  if (cone.empty()) return;
  if (norm && std::none_of(cone.begin(), cone.end(), [&](size_t i) { return c_.node(i).op == "Gather"; })) return;
  const auto p = c_.producer_of(x);
  std::set<std::string> exposed;
  if (c_.sole_next(*p) != r) exposed.insert(x);
  for (size_t b = 0; b <= after.size(); ++b) {
    std::vector<size_t> nodes = cone;
    nodes.push_back(r);
    nodes.insert(nodes.end(), after.begin(), after.begin() + static_cast<long>(b));
    add(nodes, ClusterKind::reduction, exposed);
  }
}

std::vector<size_t> Generator::input_cone_nodes(size_t r, bool norm) const {
  const std::string& x = c_.node(r).input(0);
  const auto p = c_.producer_of(x);
  if (!p || classify_op(c_.node(*p)) != OpClass::injective || c_.single_output(*p) != x) return {};
  if (!norm && (c_.sole_next(*p) == r || !is_elementwise_math(c_.node(*p)))) return {};
  std::vector<std::string> operands;
  for (const auto& in : c_.node(*p).inputs)
    if (!in.empty() && !c_.is_constant(in)) operands.push_back(in);
  std::vector<size_t> cone = operand_cones({r, *p}, operands);
  cone.push_back(*p);
  return cone;
}

}  // namespace dc::candidate_rules
