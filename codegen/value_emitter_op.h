// What an op's row of the ValueEmitter's op table (value_emitter_ops.cpp) works with: the
// node, the output coordinates, the code being written, the compute dtype, and the
// emitter's services. Private to the ValueEmitter's files.
#pragma once

#include <string>
#include <vector>

#include "value_emitter.h"

namespace dc {

struct ValueEmitter::Op {
  ValueEmitter& e;
  const Node& n;
  size_t out_index;
  std::vector<std::string> oc;  // output coordinates in the output's own rank
  std::string& code;
  DType out_dtype = DType::f32;
  DType cd = DType::f32;        // compute dtype: f32 (f64 where f64 is involved) for float ops
  std::string ctype;            // its C type
  bool f32 = false, f64 = false, integral = false;
  std::vector<std::string> x;   // unary: x[0]; binary: x[0], x[1] (computed before the row)

  const Graph& g() const { return e.g_; }
  const TensorInfo& info(const std::string& tensor) const { return e.g_.info(tensor); }
  // Input i's value at `c`.
  std::string in(size_t i, const std::vector<std::string>& c) { return e.value(n.input(i), c, code); }
  // value() of a tensor into a loop or branch body: its locals stay there.
  std::string loop_value(const std::string& tensor, const std::vector<std::string>& c, std::string& body) {
    return e.loop_value(tensor, c, body);
  }
  std::string fresh(const char* prefix) { return e.fresh(prefix); }
  // A new local of `type` (the compute type for define) holding `expr`.
  std::string define_as(const std::string& type, const std::string& expr);
  std::string define(const std::string& expr) { return define_as(ctype, expr); }
  // A math function of the compute type: expf for f32, exp for f64.
  std::string fn(const char* name, const std::string& arg) const;
  // A literal of the compute type.
  std::string lit(double v) const;
  std::string pad() { return e.emit_pad(n, oc, code); }
  std::string resize() { return e.emit_resize(n, oc, code); }
  std::string index_search() { return e.emit_index_search(n, out_index, oc, code); }
};

// One op's value at the output coordinates, in the compute dtype; nullptr when the table
// has no row for the op.
using OpRow = std::string (*)(ValueEmitter::Op& o);
OpRow op_row(const std::string& op);

// Index maps (the input coordinates of this output element) and loops over an axis:
// value_emitter_maps.cpp.
namespace op_rows {
std::string transpose(ValueEmitter::Op& o);
std::string reshape(ValueEmitter::Op& o);
std::string expand(ValueEmitter::Op& o);
std::string tile(ValueEmitter::Op& o);
std::string slice_or_split(ValueEmitter::Op& o);
std::string concat(ValueEmitter::Op& o);
std::string gather(ValueEmitter::Op& o);
std::string arg_extreme(ValueEmitter::Op& o);
std::string cum_sum(ValueEmitter::Op& o);
std::string gather_elements(ValueEmitter::Op& o);
std::string depth_space(ValueEmitter::Op& o);
std::string trilu(ValueEmitter::Op& o);
}  // namespace op_rows

}  // namespace dc
