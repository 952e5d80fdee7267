// One table of what the compiler knows about each ONNX op type, in the style of TVM's
// OpPattern: its fusion pattern, how its output indexes its inputs, whether the ValueEmitter
// can compute it inline (and in which form), whether it fuses into a heavy op's prologue or
// epilogue, whether it must compute in fp32, and how its FLOPs are counted. The candidate
// generator, the ValueEmitter, the parameter space and the FLOP count all read this table;
// adding an op is one row here (see docs/codegen.md, "Op traits").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dc {

// Fusion pattern, finest first (TVM: kElemWise, kBroadcast, kInjective, kCommReduce,
// kOutEWiseFusable, kOpaque).
enum class OpPattern {
  elemwise,   // one output element from the same position of each (broadcast) input
  broadcast,  // Expand: the input read at the output's position, numpy broadcasting
  injective,  // index maps: each output element is one input element at a computed position
  reduce,     // a reduction or normalisation over axes (Softmax, LayerNorm, Reduce*, ...)
  window,     // a sliding-window pool (MaxPool, AveragePool, LpPool)
  heavy,      // Conv, MatMul, Gemm: complex-out-fusable, epilogues/prologues attach to it
  opaque,     // everything else: computed alone, fusion does not cross it
};

// How the candidate generator groups an op (coarser than OpPattern).
enum class OpClass {
  heavy,      // OpPattern::heavy
  reduction,  // OpPattern::reduce and ::window
  injective,  // OpPattern::elemwise, ::broadcast and ::injective
  opaque,     // OpPattern::opaque
};

// Where an output element reads its inputs.
enum class IndexMap {
  unknown,  // opaque or not an element-to-element map
  same,     // the element's own position (up to broadcasting)
  linear,   // the same row-major linear index (Reshape, Flatten, Squeeze, Unsqueeze)
  remap,    // another position (Transpose, Slice, Gather, Pad, pooling windows, ...)
};

// The ValueEmitter's form of an op it computes inline.
enum class EmitForm {
  none,    // not emitted inline (its own template or the reference kernel)
  unary,   // f(x) (extra inputs constant scalars: Clip's bounds, PRelu's slope)
  binary,  // f(a, b), variadic ops folded left to right
  select,  // Where
  index,   // an index map (IndexMap::linear or ::remap, or Expand)
};

// How the op fuses after (epilogue) a heavy op whose output is its input 0 / either input.
enum class EpilogueForm {
  none,
  unary,        // an activation or Cast of the chain value; other inputs constant
  commutative,  // Add / Mul: the other operand constant (Add also a same-shape residual)
  ordered,      // Sub / Div: chain value on the left, a constant on the right
};

// How FLOPs are counted (ir/flops.h): `per_element` times the basis's element count.
enum class FlopsBasis {
  none,         // data movement: 0
  output,       // output elements
  input,        // input 0's elements
  window,       // output elements times the window size
  contraction,  // Conv / Gemm / MatMul: 2 per multiply-add (formula in flops.cpp)
};

// Which axes a reduce-pattern op reduces: the rows of its workload (the parameter space's
// analyze_reduction, the row_reduce template).
enum class ReduceAxes {
  none,      // not a reduction
  listed,    // Reduce*: the `axes` attribute or constant input, else every axis
  softmax,   // Softmax, LogSoftmax, Hardmax: `axis` (opset < 13's flatten: `axis` to the end)
  trailing,  // LayerNormalization, RMSNormalization: `axis` (default -1) to the end
  spatial,   // Global*Pool, InstanceNormalization: axes 2 to the end
  one,       // LpNormalization: `axis` (default -1)
};

struct OpTraits {
  std::string_view op;
  OpPattern pattern = OpPattern::opaque;
  IndexMap index = IndexMap::unknown;
  EmitForm emit = EmitForm::none;
  EpilogueForm epilogue = EpilogueForm::none;
  bool prologue = false;      // computed inside a heavy op's operand load
  bool passes_value = false;  // output values are input values, unchanged (no rounding)
  bool fp32_compute = false;  // numerically sensitive: computes in fp32 under fp16/bf16 plans
  FlopsBasis flops = FlopsBasis::output;
  int flops_per_element = 1;
  // Reductions (OpPattern::reduce): the reduced axes, the tree reductions per row (softmax:
  // max and sum), the passes over a row's input when it is not kept on chip, and whether the
  // row_reduce template computes it (the others are lowered before codegen, or opaque).
  ReduceAxes reduce_axes = ReduceAxes::none;
  int reductions_per_row = 1;
  int stream_reads = 1;
  bool row_template = false;
};

// The op's row; ops not in the table get the defaults (opaque, one FLOP per output element).
const OpTraits& op_traits(std::string_view op);
// Every row, in op-name order.
const std::vector<OpTraits>& all_op_traits();

OpClass op_class(std::string_view op);
const char* op_class_name(OpClass c);

// Pattern elemwise: pointwise math, activations, comparisons, Cast, Identity.
bool is_elementwise_math(std::string_view op);
// The ValueEmitter computes the op inline.
bool is_emittable(std::string_view op);
// Every input read at the element's own position up to broadcasting (ValueEmitter ops only).
bool is_pointwise_op(std::string_view op);

}  // namespace dc
