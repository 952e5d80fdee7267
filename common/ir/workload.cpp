#include "ir/workload.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "ir/error.h"
#include "ir/flops.h"
#include "ir/state_names.h"

namespace dc {

namespace {

// Role of a tensor the cluster reads but does not produce.
enum class Role { act, weight, constant };

const char* role_name(Role r) {
  switch (r) {
    case Role::act: return "act";
    case Role::weight: return "weight";
    case Role::constant: return "const";
  }
  return "?";
}

// Shortest text that reads back as the same float (9 significant digits round-trip f32).
std::string float_text(double v, int digits = 9) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string type_text(const TensorInfo& info) {
  return std::string(dtype_name(info.dtype)) + shape_text(info.shape);
}

// Values of a constant, exactly: integers as integers, floats with round-trip digits.
std::string values_text(const Tensor& t) {
  std::string out = "[";
  if (t.dtype() == DType::f64) {
    const double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) out += (i ? "," : "") + float_text(p[i], 17);
  } else if (is_float(t.dtype())) {
    const auto v = t.to_float_vector();
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + float_text(v[i]);
  } else {
    const auto v = t.to_int64_vector();
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  }
  return out + "]";
}

std::string tensor_attr_text(const Tensor& t) {
  std::string out = "tensor<" + std::string(dtype_name(t.dtype())) + shape_text(t.shape()) + ">";
  if (t.numel() <= 16) return out + values_text(t);
  // A large tensor attribute is still structure (it is part of the op), but its text
  // would swamp the line: its bytes' hash stands for it.
  return out + "#" +
         fnv1a_hex(std::string(reinterpret_cast<const char*>(t.raw()), t.nbytes()));
}

std::string attr_text(const AttrValue& v) {
  struct Visitor {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(float x) const { return float_text(x); }
    std::string operator()(const std::string& x) const { return "\"" + x + "\""; }
    std::string operator()(const std::vector<int64_t>& x) const { return shape_text(x); }
    std::string operator()(const std::vector<float>& x) const {
      std::string out = "[";
      for (size_t i = 0; i < x.size(); ++i) out += (i ? "," : "") + float_text(x[i]);
      return out + "]";
    }
    std::string operator()(const std::vector<std::string>& x) const {
      std::string out = "[";
      for (size_t i = 0; i < x.size(); ++i) out += (i ? ",\"" : "\"") + x[i] + "\"";
      return out + "]";
    }
    std::string operator()(const Tensor& x) const { return tensor_attr_text(x); }
  };
  return std::visit(Visitor{}, v);
}

// "Op(a=1,b=[2,3])": attributes in name order (std::map keeps them sorted).
std::string op_text(const Node& n) {
  std::string out = n.op + "(";
  bool first = true;
  for (const auto& [name, value] : n.attrs.all()) {
    out += (first ? "" : ",") + name + "=" + attr_text(value);
    first = false;
  }
  return out + ")";
}

TensorInfo info_of(const Graph& g, const std::string& name) {
  auto it = g.tensors.find(name);
  if (it != g.tensors.end()) return it->second;
  auto c = g.initializers.find(name);
  DC_INTERNAL_CHECK(c != g.initializers.end(), "no type known for tensor '", name, "'");
  return {c->second.dtype(), c->second.shape()};
}

int64_t tensor_bytes(const TensorInfo& info) {
  return shape_numel(info.shape) * static_cast<int64_t>(dtype_size(info.dtype));
}

// The bytes a kernel must read of external input `t`: all of it, unless the cluster only
// gathers from it (the data operand of Gather, GatherElements, GatherND): then what the
// picked elements touch. BERT's word embedding holds 94 MB of which a batch of 256 tokens
// reads 786 KB; a cross-entropy's label pick reads one value per row of the log-probs.
int64_t input_read_bytes(const Graph& g, const std::string& t, const std::vector<size_t>& nodes) {
  const TensorInfo info = info_of(g, t);
  const int64_t whole = tensor_bytes(info);
  const int64_t elem = static_cast<int64_t>(dtype_size(info.dtype));
  int64_t gathered = 0;
  for (size_t i : nodes) {
    const Node& n = g.nodes[i];
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      if (n.inputs[s] != t) continue;
      const bool table = s == 0 && (n.op == "Gather" || n.op == "GatherElements" || n.op == "GatherND");
      if (!table || n.outputs.empty() || n.outputs[0].empty()) return whole;
      // Gather copies whole slices (one table row per index, read coalesced); the element
      // gathers take one element per output, each in a 32-byte DRAM sector of its own.
      const int64_t picked = shape_numel(info_of(g, n.outputs[0]).shape);
      gathered += picked * (n.op == "Gather" ? elem : std::max<int64_t>(elem, 32));
    }
  }
  return std::min(whole, gathered);
}

// One node's canonical line, with tensor names given by `name_of`.
std::string node_line(const Graph& g, const Node& n, size_t index,
                      const std::function<std::string(const std::string&)>& name_of) {
  std::string line = "n" + std::to_string(index) + " " + op_text(n) + " ";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    line += (i ? "," : "") + (n.inputs[i].empty() ? std::string("-") : name_of(n.inputs[i]));
  line += " ->";
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    line += i ? ", " : " ";
    if (n.outputs[i].empty()) {
      line += "-";
      continue;
    }
    line += name_of(n.outputs[i]) + " : " + type_text(info_of(g, n.outputs[i]));
  }
  return line;
}

// The cluster's nodes in a canonical topological order: Kahn's algorithm where, among the
// ready nodes, the one with the smallest structural line goes first (names in that line
// are provisional, given by structure alone), then the lowest model index. Two models
// that order independent branches differently thus give the same order.
std::vector<size_t> canonical_order(const Graph& g, const std::vector<size_t>& nodes,
                                    const std::map<std::string, size_t>& produced_by,
                                    const std::map<std::string, Role>& external) {
  std::map<size_t, int> missing;
  std::map<size_t, std::vector<size_t>> users;
  for (size_t i : nodes) {
    std::set<size_t> deps;
    for (const auto& in : g.nodes[i].inputs) {
      auto it = produced_by.find(in);
      if (!in.empty() && it != produced_by.end()) deps.insert(it->second);
    }
    missing[i] = static_cast<int>(deps.size());
    for (size_t d : deps) users[d].push_back(i);
  }
  std::map<std::string, std::string> provisional;
  int next_external = 0, next_internal = 0;
  auto name_of = [&](const std::string& t) -> std::string {
    auto it = provisional.find(t);
    if (it != provisional.end()) return it->second;
    // Not named yet: an external tensor, described by what it is, or an output to be.
    auto e = external.find(t);
    if (e == external.end()) return "?";
    return std::string("?") + role_name(e->second) + type_text(info_of(g, t));
  };
  std::set<size_t> ready;
  for (size_t i : nodes)
    if (missing[i] == 0) ready.insert(i);
  std::vector<size_t> order;
  while (!ready.empty()) {
    size_t best = *ready.begin();
    std::string best_key;
    for (size_t i : ready) {
      std::string key = node_line(g, g.nodes[i], 0, name_of);
      if (i == *ready.begin() || key < best_key) {
        best = i;
        best_key = std::move(key);
      }
    }
    ready.erase(best);
    order.push_back(best);
    const Node& n = g.nodes[best];
    for (const auto& in : n.inputs)
      if (!in.empty() && !provisional.count(in)) provisional[in] = "e" + std::to_string(next_external++);
    for (const auto& out : n.outputs)
      if (!out.empty()) provisional[out] = "p" + std::to_string(next_internal++);
    for (size_t u : users[best])
      if (--missing[u] == 0) ready.insert(u);
  }
  DC_INTERNAL_CHECK(order.size() == nodes.size(), "cluster of ", nodes.size(),
                    " nodes has a cycle");
  return order;
}

}  // namespace

const char* cluster_kind_name(ClusterKind k) {
  switch (k) {
    case ClusterKind::gemm: return "gemm";
    case ClusterKind::conv: return "conv";
    case ClusterKind::depthwise: return "depthwise";
    case ClusterKind::reduction: return "reduction";
    case ClusterKind::elementwise: return "elementwise";
    case ClusterKind::attention: return "attention";
    case ClusterKind::opaque: return "opaque";
  }
  return "?";
}

bool is_structural_constant(const Tensor& t) {
  if (t.numel() > 16) return false;
  return t.numel() == 1 || is_integer(t.dtype()) || t.dtype() == DType::boolean;
}

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

Workload make_workload(const Graph& g, const std::vector<size_t>& nodes_in, ClusterKind kind,
                       const std::map<std::string, std::vector<size_t>>* known_consumers) {
  DC_INTERNAL_CHECK(!nodes_in.empty(), "make_workload of an empty cluster");
  std::vector<size_t> nodes = nodes_in;
  std::sort(nodes.begin(), nodes.end());
  DC_INTERNAL_CHECK(std::adjacent_find(nodes.begin(), nodes.end()) == nodes.end(),
                    "make_workload: a node is listed twice");
  DC_INTERNAL_CHECK(nodes.back() < g.nodes.size(), "make_workload: node index ", nodes.back(),
                    " out of range (", g.nodes.size(), " nodes)");
  const std::set<size_t> inside(nodes.begin(), nodes.end());

  std::map<std::string, size_t> produced_by;
  for (size_t i : nodes)
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) produced_by[out] = i;
  // Pad's pads/fill/axes and Resize's roi/scales/sizes are geometry, whatever their dtype.
  auto parameter = [&](const Node& n, size_t slot) {
    return slot >= 1 && (n.op == "Pad" || n.op == "Resize" || n.op == "Upsample");
  };
  // A training step's state (ir/state_names.h) changes from step to step: never
  // baked into a kernel, however small (the step counter, a one-element weight).
  auto training_state = [&](const std::string& t) {
    return std::find(g.outputs.begin(), g.outputs.end(), next_name(t)) != g.outputs.end();
  };
  std::map<std::string, Role> external;
  for (size_t i : nodes)
    for (size_t s = 0; s < g.nodes[i].inputs.size(); ++s) {
      const std::string& in = g.nodes[i].inputs[s];
      if (in.empty() || produced_by.count(in)) continue;
      auto c = g.initializers.find(in);
      external[in] = c == g.initializers.end() ? Role::act
                     : (is_structural_constant(c->second) && !training_state(in)) || parameter(g.nodes[i], s)
                         ? Role::constant
                         : Role::weight;
    }

  const std::vector<size_t> order = canonical_order(g, nodes, produced_by, external);

  // Final names: external tensors t0.. in order of first use, then produced tensors in
  // production order.
  std::map<std::string, std::string> names;
  std::vector<std::string> external_order, produced_order;
  for (size_t i : order)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && external.count(in) && !names.count(in)) {
        names[in] = "t" + std::to_string(names.size());
        external_order.push_back(in);
      }
  for (size_t i : order)
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) {
        names[out] = "t" + std::to_string(names.size());
        produced_order.push_back(out);
      }
  auto name_of = [&](const std::string& t) { return names.at(t); };

  // Outputs: read outside the cluster, a graph output, or read by nobody.
  std::map<std::string, std::vector<size_t>> own_consumers;
  if (!known_consumers) own_consumers = g.consumers();
  const auto& consumers = known_consumers ? *known_consumers : own_consumers;
  const std::set<std::string> graph_outputs(g.outputs.begin(), g.outputs.end());
  std::vector<std::string> outputs;
  for (const auto& t : produced_order) {
    auto it = consumers.find(t);
    const bool read_outside =
        it != consumers.end() &&
        std::any_of(it->second.begin(), it->second.end(), [&](size_t u) { return !inside.count(u); });
    if (read_outside || graph_outputs.count(t) || it == consumers.end()) outputs.push_back(t);
  }

  Workload w;
  w.kind = kind;
  w.graph.name = "workload";
  w.graph.opset = g.opset;
  std::string text = std::string("kind ") + cluster_kind_name(kind) + "\n";
  for (const auto& t : external_order) {
    const TensorInfo info = info_of(g, t);
    const Role role = external.at(t);
    const std::string& n = names.at(t);
    w.graph.tensors[n] = info;
    text += "in " + n + " " + role_name(role) + " " + type_text(info);
    if (role == Role::constant) {
      const Tensor& value = g.initializers.at(t);
      text += " = " + values_text(value);
      w.graph.initializers[n] = value;
    } else {
      w.graph.inputs.push_back(n);
      w.source_inputs.push_back(t);
      if (role == Role::weight) w.weights.push_back(n);
      w.bytes += input_read_bytes(g, t, order);
    }
    text += "\n";
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const Node& src = g.nodes[order[k]];
    Node n;
    n.name = "n" + std::to_string(k);
    n.op = src.op;
    n.attrs = src.attrs;
    for (const auto& in : src.inputs) n.inputs.push_back(in.empty() ? "" : names.at(in));
    for (const auto& out : src.outputs) {
      n.outputs.push_back(out.empty() ? "" : names.at(out));
      if (!out.empty()) w.graph.tensors[names.at(out)] = info_of(g, out);
    }
    text += node_line(g, src, k, name_of) + "\n";
    w.flops += node_flops(g, src);
    w.graph.nodes.push_back(std::move(n));
  }
  text += "out";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& n = names.at(outputs[i]);
    text += (i ? "," : " ") + n;
    w.graph.outputs.push_back(n);
    w.source_outputs.push_back(outputs[i]);
    w.bytes += tensor_bytes(info_of(g, outputs[i]));
  }
  text += "\n";
  w.canonical = std::move(text);
  w.signature = fnv1a_hex(w.canonical);
  return w;
}

}  // namespace dc
