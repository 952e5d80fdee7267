// Emits CUDA C for the value of a workload tensor at given coordinates, pulling through the
// injective part of the workload graph: elementwise math with numpy broadcasting, Cast,
// Where, and index maps (Transpose, Reshape/Flatten/Squeeze/Unsqueeze, Expand, Slice,
// Concat, Gather, Split, Tile, Pad, Resize/Upsample). This is how every template fuses prologues and epilogues: a
// GEMM epilogue binds the accumulator to the heavy op's output and asks for the cluster
// output's value at the same coordinates; an elementwise kernel asks for each output at its
// element.
//
// Generated code is statements appended to a string (one local per distinct
// (tensor, coordinates) pair, so shared subexpressions are computed once) and an
// expression naming the result. Math follows the CPU reference executor (common/ref/) and
// its rule for mixed float dtypes: a float op computes in f32 (f64 where f64 is involved)
// with the float functions, integers with C integer arithmetic. f16/bf16 tensors are values
// of C type float: loaded through dc_to_f32, and every f16/bf16 tensor the emitter computes
// is rounded to its storage type (dc_round_f16/dc_round_bf16), so that a fused chain equals
// the reference, which rounds at every store. A template binding an f16/bf16 tensor binds
// its rounded value (round_to_storage) and stores outputs through store_value.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_traits.h"

namespace dc {

class ValueEmitter {
 public:
  // `g` is a workload graph (ir/workload.h). Kernel parameters are named after the
  // workload: graph input i is `in<i>`, graph output j is `out<j>` (see param_name).
  explicit ValueEmitter(const Graph& g);

  // A tensor whose value at the current element is already computed in C variable `var`.
  // Reads of it return `var` whatever the coordinates, so bind only tensors read at the
  // coordinates of the current element (what epilogues do).
  void bind(const std::string& tensor, const std::string& var);
  // Forgets a binding (reads load or compute the tensor again).
  void unbind(const std::string& tensor);

  // Appends statements to `code` and returns a C expression for `tensor` at `coords` (one C
  // expression per dimension, outermost first; fewer than the rank is an InternalError).
  std::string value(const std::string& tensor, const std::vector<std::string>& coords,
                    std::string& code);
  // value() with its statements dedented before they are appended (for templates that
  // indent the code around them themselves).
  std::string value_dedented(const std::string& tensor, const std::vector<std::string>& coords,
                             std::string& code);

  // True if `op` (with these attributes) can be emitted inline.
  static bool supports(const Node& n);

  // Kernel parameter name of a workload input or output tensor.
  std::string param_name(const std::string& tensor) const;
  // C expression of the row-major element offset of `coords` in `tensor` (broadcast dims of
  // extent 1 contribute nothing).
  std::string offset(const std::string& tensor, const std::vector<std::string>& coords) const;

  // Forgets the per-element locals (call between elements/loops that reuse coordinates).
  void reset_locals();

  // An op's emission context (value_emitter_op.h), the argument of the op table's rows.
  struct Op;

 private:
  std::string fresh(const char* prefix);
  std::string load(const std::string& tensor, const std::vector<std::string>& coords,
                   std::string& code);
  // emit_op, then the result rounded (or converted) to the output's dtype where needed.
  std::string emit_node(const Node& n, size_t out_index, const std::vector<std::string>& coords,
                        std::string& code);
  // The op's value in its compute dtype.
  std::string emit_op(const Node& n, size_t out_index, const std::vector<std::string>& coords,
                      std::string& code);
  // f64 if the output or a float input (Pow's exponent aside) is f64, else f32 if any of them
  // is float, else the output's dtype.
  DType compute_dtype(const Node& n, DType out) const;
  std::vector<std::string> broadcast_coords(const std::string& tensor,
                                            const std::vector<std::string>& coords) const;
  // Pad and Resize/Upsample (value_emitter_resample.cpp): index maps over ref/resample.h.
  std::string emit_pad(const Node& n, const std::vector<std::string>& oc, std::string& code);
  std::string emit_resize(const Node& n, const std::vector<std::string>& oc, std::string& code);
  // GatherND, ScatterND, ScatterElements (Scatter), OneHot, TopK (value_emitter_index.cpp).
  static bool is_index_search_op(const std::string& op);
  std::string emit_index_search(const Node& n, size_t out_index, const std::vector<std::string>& oc,
                                std::string& code);
  // value() into a loop body: the locals it makes stay in that body.
  std::string loop_value(const std::string& tensor, const std::vector<std::string>& coords,
                         std::string& body);
  // The values of n's parameter inputs (1..), which must be constants; input 0 is left
  // undefined.
  std::vector<Tensor> param_values(const Node& n) const;

  const Graph& g_;
  std::map<std::string, size_t> producer_;   // tensor -> node index
  std::map<std::string, std::string> params_;
  std::map<std::string, std::string> bound_;
  std::map<std::string, std::string> memo_;  // tensor + coords -> local
  int counter_ = 0;
};

// C type of a tensor's values in generated code: float for f16/bf16 (stored as dc_half /
// dc_bfloat16, computed in float), cuda_type otherwise.
const char* value_type(DType t);
// `expr` (a float) rounded to the values of f16/bf16 (dc_round_f16/dc_round_bf16); `expr`
// itself for other dtypes.
std::string round_to_storage(DType t, const std::string& expr);
// The value of a loaded element expression of dtype `t` (dc_to_f32 for f16/bf16).
std::string load_value(DType t, const std::string& element);
// The expression to assign to an element of dtype `t` from value `expr`
// (dc_from_f32<dc_half>(expr) for f16, ...; `expr` for other dtypes).
std::string store_value(DType t, const std::string& expr);

// A float literal that round-trips ("1.5f", "-0x1.8p+3f" style is avoided for readability).
std::string float_literal(double v);
// A double literal that round-trips and is never read as an integer (NaN and infinities as
// bit patterns).
std::string double_literal(double v);

// is_pointwise_op (ops reading every input at the element's own position) is in
// ir/op_traits.h.

// Graph inputs that the values of `roots` read only at the element's own position (every
// path from a root to the input goes through pointwise ops, no index map), f32, not
// broadcast along the innermost dimension (their last extent equals `inner`, the roots'
// last extent), so that `vec` adjacent elements of a root read `vec` adjacent, aligned
// elements of the input when `inner` divides by `vec` (f16/bf16 inputs are read element by
// element). Templates load these as float2/float4
// and bind the lanes; everything else they read element by element.
// With `halves`, f16/bf16 inputs qualify too (the template loads them as 32-bit pairs and
// unpacks them with dc_unpack_f16x2 / dc_unpack_bf16x2).
std::set<std::string> vector_loadable_inputs(const Graph& g, const std::vector<std::string>& roots,
                                             int64_t inner, bool halves = false);

}  // namespace dc
