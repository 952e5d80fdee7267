#include "ir/graph.h"

#include <queue>
#include <set>

#include "ir/error.h"

namespace dc {

namespace {

const char* attr_type_name(const AttrValue& v) {
  switch (v.index()) {
    case 0: return "int";
    case 1: return "float";
    case 2: return "string";
    case 3: return "ints";
    case 4: return "floats";
    case 5: return "strings";
    case 6: return "tensor";
  }
  return "?";
}

template <class T>
const T& expect(const AttrValue& v, const std::string& name, const char* want) {
  if (const T* p = std::get_if<T>(&v)) return *p;
  throw_user_error("attribute '", name, "' should be of type ", want, " but is ",
                   attr_type_name(v));
}

}  // namespace

const AttrValue& Attributes::at(const std::string& name) const {
  auto it = values_.find(name);
  DC_USER_CHECK(it != values_.end(), "required attribute '", name, "' is missing");
  return it->second;
}

int64_t Attributes::get_int(const std::string& name) const {
  return expect<int64_t>(at(name), name, "int");
}
int64_t Attributes::get_int(const std::string& name, int64_t dflt) const {
  return has(name) ? get_int(name) : dflt;
}
float Attributes::get_float(const std::string& name) const {
  const AttrValue& v = at(name);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<float>(*i);
  return expect<float>(v, name, "float");
}
float Attributes::get_float(const std::string& name, float dflt) const {
  return has(name) ? get_float(name) : dflt;
}
std::string Attributes::get_string(const std::string& name) const {
  return expect<std::string>(at(name), name, "string");
}
std::string Attributes::get_string(const std::string& name, const std::string& dflt) const {
  return has(name) ? get_string(name) : dflt;
}
std::vector<int64_t> Attributes::get_ints(const std::string& name) const {
  return expect<std::vector<int64_t>>(at(name), name, "ints");
}
std::vector<int64_t> Attributes::get_ints(const std::string& name,
                                          const std::vector<int64_t>& dflt) const {
  return has(name) ? get_ints(name) : dflt;
}
std::vector<float> Attributes::get_floats(const std::string& name) const {
  return expect<std::vector<float>>(at(name), name, "floats");
}
const Tensor& Attributes::get_tensor(const std::string& name) const {
  return expect<Tensor>(at(name), name, "tensor");
}

bool Attributes::operator==(const Attributes& o) const {
  if (values_.size() != o.values_.size()) return false;
  for (const auto& [k, v] : values_) {
    auto it = o.values_.find(k);
    if (it == o.values_.end() || it->second.index() != v.index()) return false;
    const bool same = std::visit(
        [&](const auto& a) {
          using T = std::decay_t<decltype(a)>;
          const T& b = std::get<T>(it->second);
          if constexpr (std::is_same_v<T, Tensor>) {
            return a.bitwise_equal(b);
          } else {
            return a == b;
          }
        },
        v);
    if (!same) return false;
  }
  return true;
}

const std::string& Node::input(size_t i) const {
  static const std::string kEmpty;
  return i < inputs.size() ? inputs[i] : kEmpty;
}

const TensorInfo& Graph::info(const std::string& tensor) const {
  auto it = tensors.find(tensor);
  DC_INTERNAL_CHECK(it != tensors.end(), "no type known for tensor '", tensor, "'");
  return it->second;
}

std::optional<size_t> Graph::producer(const std::string& tensor) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (o == tensor) return i;
  return std::nullopt;
}

std::map<std::string, std::vector<size_t>> Graph::consumers() const {
  std::map<std::string, std::vector<size_t>> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& in : nodes[i].inputs)
      if (!in.empty()) out[in].push_back(i);
  return out;
}

int64_t Graph::parameter_count() const {
  int64_t n = 0;
  for (const auto& [tensor_name, t] : initializers) n += t.numel();
  return n;
}

std::map<std::string, int64_t> Graph::op_counts() const {
  std::map<std::string, int64_t> out;
  for (const auto& n : nodes) ++out[n.op];
  return out;
}

Graph topo_sort(Graph g) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) {
      if (o.empty()) continue;
      DC_USER_CHECK(!producer.count(o), "tensor '", o, "' is produced by two nodes ('",
                    g.nodes[producer[o]].name, "' and '", g.nodes[i].name, "')");
      DC_USER_CHECK(!g.initializers.count(o), "tensor '", o,
                    "' is both an initializer and the output of node '", g.nodes[i].name, "'");
      producer[o] = i;
    }
  std::set<std::string> available(g.inputs.begin(), g.inputs.end());
  for (const auto& [name, t] : g.initializers) available.insert(name);

  // Kahn's algorithm; a min-heap on the original index keeps the order stable.
  std::vector<int> missing(g.nodes.size(), 0);
  std::vector<std::vector<size_t>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::set<size_t> deps;
    for (const auto& in : g.nodes[i].inputs) {
      if (in.empty() || available.count(in)) continue;
      auto it = producer.find(in);
      DC_USER_CHECK(it != producer.end(), "node '", g.nodes[i].name, "' (", g.nodes[i].op,
                    ") reads tensor '", in,
                    "', which no node, graph input or initializer defines");
      deps.insert(it->second);
    }
    missing[i] = static_cast<int>(deps.size());
    for (size_t d : deps) users[d].push_back(i);
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (missing[i] == 0) ready.push(i);
  std::vector<Node> order;
  order.reserve(g.nodes.size());
  std::vector<bool> done(g.nodes.size(), false);
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    done[i] = true;
    order.push_back(g.nodes[i]);
    for (size_t u : users[i])
      if (--missing[u] == 0) ready.push(u);
  }
  if (order.size() != g.nodes.size()) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!done[i])
        throw_user_error("the graph has a cycle through node '", g.nodes[i].name, "' (",
                         g.nodes[i].op, ")");
  }
  g.nodes = std::move(order);
  return g;
}

}  // namespace dc
