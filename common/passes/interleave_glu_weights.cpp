#include "passes/interleave_glu_weights.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "ir/error.h"
#include "ir/glu.h"
#include "ir/lazy_bytes.h"
#include "passes/match.h"

namespace dc {

namespace {

// [rows, 2F] f32 with the columns of the two halves interleaved: out[r, 2j] = in[r, j],
// out[r, 2j + 1] = in[r, F + j]. Computed when the bytes are needed (row by row), so a
// weight on disk stays there until the plan streams it into weights.bin.
class InterleaveColumns : public ComputedBytes {
 public:
  InterleaveColumns(Tensor in, size_t rows, size_t cols) : in_(std::move(in)), rows_(rows), cols_(cols) {}

  size_t size() const override { return rows_ * cols_ * sizeof(float); }

  void compute(size_t from, size_t n, std::byte* dst) const override {
    const size_t row_bytes = cols_ * sizeof(float), half = cols_ / 2;
    std::vector<float> src(cols_), row(cols_);
    auto* out = static_cast<std::byte*>(dst);
    for (size_t pos = from; pos < from + n;) {
      const size_t r = pos / row_bytes, within = pos % row_bytes;
      in_.copy_bytes(r * row_bytes, row_bytes, src.data());
      for (size_t j = 0; j < half; ++j) {
        row[2 * j] = src[j];
        row[2 * j + 1] = src[half + j];
      }
      const size_t len = std::min(row_bytes - within, from + n - pos);
      std::memcpy(out + (pos - from), reinterpret_cast<const std::byte*>(row.data()) + within, len);
      pos += len;
    }
  }

 private:
  Tensor in_;
  size_t rows_, cols_;
};

std::string int_constant(Graph& g, const std::string& base, int64_t v) {
  const std::string name = match::unique_name(g, base);
  Tensor t = Tensor::from_vector<int64_t>({1}, {v});
  g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  g.initializers[name] = std::move(t);
  return name;
}

// The halves [0, F) and [F, 2F) of MatMul node i's output, as the Slice nodes taking them.
std::optional<std::pair<size_t, size_t>> halves(const Graph& g, const match::Uses& uses, size_t i) {
  const Node& mm = g.nodes[i];
  if (mm.op != "MatMul" || mm.inputs.size() != 2 || mm.outputs.size() != 1) return std::nullopt;
  auto w = g.initializers.find(mm.inputs[1]);
  if (w == g.initializers.end() || w->second.dtype() != DType::f32 || w->second.rank() != 2) return std::nullopt;
  const std::string& y = mm.outputs[0];
  const int64_t n = w->second.dim(1);
  if (n < 2 || n % 2 != 0 || uses.outputs.count(y) || g.info(y).shape.size() < 2) return std::nullopt;
  std::optional<size_t> lo, hi;
  for (size_t u : uses.of(y)) {
    const Node& s = g.nodes[u];
    const auto sl = last_axis_slice(g, s);
    if (!sl || s.input(0) != y || std::count(s.inputs.begin(), s.inputs.end(), y) != 1 || sl->step != 1)
      return std::nullopt;
    if (sl->end - sl->start != n / 2) return std::nullopt;
    std::optional<size_t>* slot = sl->start == 0 ? &lo : sl->start == n / 2 ? &hi : nullptr;
    if (!slot || *slot) return std::nullopt;
    *slot = u;
  }
  if (!lo || !hi) return std::nullopt;
  return std::make_pair(*lo, *hi);
}

}  // namespace

Graph interleave_glu_weights(Graph g) {
  const match::Uses uses(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto h = halves(g, uses, i);
    if (!h || !glu_combiner(g, g.nodes[h->first].outputs[0], g.nodes[h->second].outputs[0])) continue;
    Node& mm = g.nodes[i];
    const Tensor& w = g.initializers.at(mm.inputs[1]);
    const int64_t k = w.dim(0), n = w.dim(1);
    const std::string name = match::unique_name(g, mm.inputs[1] + "_glu");
    g.initializers[name] = Tensor::from_lazy(
        DType::f32, Shape{k, n},
        std::make_shared<InterleaveColumns>(w, static_cast<size_t>(k), static_cast<size_t>(n)));
    g.tensors[name] = TensorInfo{DType::f32, Shape{k, n}};
    mm.inputs[1] = name;
    const std::string base = mm.name.empty() ? mm.outputs[0] : mm.name;
    const std::string end = int_constant(g, base + "_glu_end", n);
    const std::string axis = int_constant(g, base + "_glu_axis", -1);
    const std::string step = int_constant(g, base + "_glu_step", 2);
    for (size_t s : {h->first, h->second}) {
      Node& sl = g.nodes[s];
      const std::string start = int_constant(g, base + "_glu_start", s == h->first ? 0 : 1);
      sl.inputs = {sl.inputs[0], start, end, axis, step};
      sl.attrs = {};
    }
  }
  return g;
}

}  // namespace dc
