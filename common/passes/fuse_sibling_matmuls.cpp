#include "passes/fuse_sibling_matmuls.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/lazy_bytes.h"
#include "passes/match.h"

namespace dc {

namespace {

struct Sibling {
  size_t matmul = 0;
  std::optional<size_t> bias_add;
  std::string bias;  // the bias initializer, if bias_add
  int64_t n = 0;
};

// MatMul node i reading x with an f32 [K, N] weight: its N, else 0.
int64_t weight_columns(const Graph& g, const Node& n, const std::string& x, int64_t k) {
  if (n.op != "MatMul" || n.inputs.size() != 2 || n.inputs[0] != x || n.inputs[1] == x) return 0;
  auto it = g.initializers.find(n.inputs[1]);
  if (it == g.initializers.end() || it->second.dtype() != DType::f32 || it->second.rank() != 2 ||
      it->second.dim(0) != k)
    return 0;
  return it->second.dim(1);
}

// The Add of a [N] f32 bias initializer that alone reads the sibling's output.
void find_bias(const Graph& g, const match::Uses& uses, Sibling& s) {
  const std::string& y = g.nodes[s.matmul].outputs[0];
  const auto u = uses.sole_consumer(y);
  if (!u || g.nodes[*u].op != "Add") return;
  const auto b = match::other_input(g.nodes[*u], y);
  if (!b) return;
  auto it = g.initializers.find(*b);
  if (it == g.initializers.end() || it->second.dtype() != DType::f32 || it->second.rank() != 1 ||
      it->second.dim(0) != s.n)
    return;
  s.bias_add = u;
  s.bias = *b;
}

// The rows of [rows, n_i] parts side by side, [rows, sum n_i], computed when the bytes are
// needed (a weight on disk stays there until the plan streams it into weights.bin).
class ConcatColumns : public ComputedBytes {
 public:
  ConcatColumns(std::vector<Tensor> parts, size_t rows) : parts_(std::move(parts)), rows_(rows) {
    for (const auto& p : parts_) {
      row_bytes_.push_back(p.nbytes() / rows_);
      total_row_ += row_bytes_.back();
    }
  }

  size_t size() const override { return rows_ * total_row_; }

  void compute(size_t from, size_t n, std::byte* dst) const override {
    auto* out = static_cast<std::byte*>(dst);
    for (size_t pos = from; pos < from + n;) {
      const size_t row = pos / total_row_;
      size_t within = pos % total_row_, k = 0;
      while (within >= row_bytes_[k]) within -= row_bytes_[k++];
      const size_t len = std::min(row_bytes_[k] - within, from + n - pos);
      parts_[k].copy_bytes(row * row_bytes_[k] + within, len, out + (pos - from));
      pos += len;
    }
  }

 private:
  std::vector<Tensor> parts_;
  size_t rows_;
  std::vector<size_t> row_bytes_;
  size_t total_row_ = 0;
};

// Columns of the [K, N_i] weights side by side: [K, sum N_i]. Biases: one row.
Tensor concat_columns(const std::vector<const Tensor*>& parts, int64_t rows) {
  int64_t total = 0;
  std::vector<Tensor> copies;  // share the parts' bytes
  for (const auto* p : parts) {
    total += p->numel() / rows;
    copies.push_back(*p);
  }
  return Tensor::from_lazy(DType::f32, rows == 1 ? Shape{total} : Shape{rows, total},
                           std::make_shared<ConcatColumns>(std::move(copies), static_cast<size_t>(rows)));
}

std::string add_initializer(Graph& g, const std::string& base, Tensor t) {
  std::string name = match::unique_name(g, base);
  g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  g.initializers[name] = std::move(t);
  return name;
}

std::string int_constant(Graph& g, const std::string& base, int64_t v) {
  return add_initializer(g, base, Tensor::from_vector<int64_t>({1}, {v}));
}

// The nodes replacing `sibs` (reading x of shape xs).
std::vector<Node> fuse(Graph& g, const std::string& x, std::vector<Sibling>& sibs) {
  const Node& first = g.nodes[sibs[0].matmul];
  const bool bias = std::all_of(sibs.begin(), sibs.end(), [](const Sibling& s) { return s.bias_add.has_value(); });
  const Shape xs = g.info(x).shape;
  const int64_t k = xs.back();
  std::vector<const Tensor*> ws, bs;
  int64_t total = 0;
  for (const auto& s : sibs) {
    ws.push_back(&g.initializers.at(g.nodes[s.matmul].inputs[1]));
    if (bias) bs.push_back(&g.initializers.at(s.bias));
    total += s.n;
  }
  const std::string base = first.name.empty() ? first.outputs[0] : first.name;
  std::vector<Node> out;
  Node mm;
  mm.name = base + "_siblings";
  mm.op = "MatMul";
  mm.inputs = {x, add_initializer(g, base + "_siblings_W", concat_columns(ws, k))};
  Shape ys = xs;
  ys.back() = total;
  mm.outputs = {match::unique_name(g, base + "_siblings_out")};
  g.tensors[mm.outputs[0]] = TensorInfo{DType::f32, ys};
  std::string y = mm.outputs[0];
  out.push_back(mm);
  if (bias) {
    Node add;
    add.name = base + "_siblings_bias";
    add.op = "Add";
    add.inputs = {y, add_initializer(g, base + "_siblings_B", concat_columns(bs, 1))};
    add.outputs = {match::unique_name(g, base + "_siblings_biased")};
    g.tensors[add.outputs[0]] = TensorInfo{DType::f32, ys};
    y = add.outputs[0];
    out.push_back(add);
  }
  int64_t offset = 0;
  const std::string axes = int_constant(g, base + "_siblings_axis", -1);
  for (auto& s : sibs) {
    const Node& orig = bias ? g.nodes[*s.bias_add] : g.nodes[s.matmul];
    Node sl;
    sl.name = orig.name.empty() ? orig.outputs[0] + "_slice" : orig.name;
    sl.op = "Slice";
    sl.inputs = {y, int_constant(g, base + "_siblings_start", offset),
                 int_constant(g, base + "_siblings_end", offset + s.n), axes};
    sl.outputs = {orig.outputs[0]};
    if (bias) g.tensors.erase(g.nodes[s.matmul].outputs[0]);
    out.push_back(sl);
    offset += s.n;
  }
  return out;
}

}  // namespace

Graph fuse_sibling_matmuls(Graph g) {
  const match::Uses uses(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::map<size_t, std::vector<Node>> inserted;  // before node index
  for (const auto& [x, readers] : uses.consumers) {
    auto xi = g.tensors.find(x);
    if (xi == g.tensors.end() || xi->second.dtype != DType::f32 || xi->second.shape.size() < 2 ||
        g.is_constant(x))
      continue;
    const int64_t k = xi->second.shape.back();
    std::vector<Sibling> sibs;
    for (size_t i : readers) {
      if (removed[i]) continue;
      if (!sibs.empty() && sibs.back().matmul == i) continue;
      if (const int64_t n = weight_columns(g, g.nodes[i], x, k); n > 0) {
        Sibling s;
        s.matmul = i;
        s.n = n;
        find_bias(g, uses, s);
        sibs.push_back(s);
      }
    }
    if (sibs.size() < 2) continue;
    std::sort(sibs.begin(), sibs.end(), [](const Sibling& a, const Sibling& b) { return a.matmul < b.matmul; });
    const bool bias = std::all_of(sibs.begin(), sibs.end(), [](const Sibling& s) { return s.bias_add.has_value(); });
    for (const auto& s : sibs) {
      removed[s.matmul] = true;
      if (bias) removed[*s.bias_add] = true;
    }
    inserted[sibs[0].matmul] = fuse(g, x, sibs);
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = inserted.find(i); it != inserted.end())
      for (auto& n : it->second) nodes.push_back(std::move(n));
    if (!removed[i]) nodes.push_back(g.nodes[i]);
  }
  g.nodes = std::move(nodes);
  return g;
}

}  // namespace dc
