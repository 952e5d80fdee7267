#include "ir/op_traits.h"

#include <algorithm>
#include <map>
#include <vector>

namespace dc {

namespace {

// A row under construction: the pattern sets the usual index map; the rest is chained.
struct Row {
  OpTraits t;
  Row(std::string_view op, OpPattern p) {
    t.op = op;
    t.pattern = p;
    if (p == OpPattern::elemwise || p == OpPattern::broadcast) t.index = IndexMap::same;
    if (p == OpPattern::injective || p == OpPattern::window) t.index = IndexMap::remap;
    if (p == OpPattern::broadcast || p == OpPattern::injective) {  // index maps
      t.emit = EmitForm::index;
      t.passes_value = true;
      t.flops = FlopsBasis::none;
    }
    if (p == OpPattern::window) t.flops = FlopsBasis::window;
  }
  Row& emit(EmitForm e) { t.emit = e; return *this; }
  Row& index(IndexMap i) { t.index = i; return *this; }
  Row& epilogue(EpilogueForm e) { t.epilogue = e; return *this; }
  Row& prologue() { t.prologue = true; return *this; }
  Row& passes() { t.passes_value = true; return *this; }
  Row& computes() { t.passes_value = false; return *this; }  // an index map that adds
  Row& fp32() { t.fp32_compute = true; return *this; }
  Row& flops(FlopsBasis b, int per = 1) { t.flops = b; t.flops_per_element = per; return *this; }
  Row& no_flops() { return flops(FlopsBasis::none, 0); }
  Row& reduces(ReduceAxes a, int reductions, int reads) {
    t.reduce_axes = a;
    t.reductions_per_row = reductions;
    t.stream_reads = reads;
    return *this;
  }
  Row& row_template() { t.row_template = true; return *this; }
};

using P = OpPattern;
using E = EmitForm;
using Ep = EpilogueForm;

std::vector<OpTraits> rows() {
  std::vector<Row> r;
  auto add = [&](std::string_view op, P p) -> Row& { return r.emplace_back(op, p); };
  // Elementwise math the ValueEmitter computes inline.
  for (auto op : {"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu",
                  "Clip"})
    add(op, P::elemwise).emit(E::unary).epilogue(Ep::unary);
  for (auto op : {"Exp", "Log", "Sqrt", "Neg", "Reciprocal", "Abs", "Erf", "Not"})
    add(op, P::elemwise).emit(E::unary);
  add("Cast", P::elemwise).emit(E::unary).epilogue(Ep::unary).prologue().no_flops();
  add("Identity", P::elemwise).emit(E::unary).passes().no_flops();
  // Dropout: the identity at inference; fusion does not cross a training-mode one.
  add("Dropout", P::opaque).index(IndexMap::same).emit(E::unary).passes().no_flops();
  add("Add", P::elemwise).emit(E::binary).epilogue(Ep::commutative);
  add("Mul", P::elemwise).emit(E::binary).epilogue(Ep::commutative).prologue();
  add("Sub", P::elemwise).emit(E::binary).epilogue(Ep::ordered);
  add("Div", P::elemwise).emit(E::binary).epilogue(Ep::ordered).prologue();
  for (auto op : {"Pow", "Max", "Min", "Equal", "Greater", "Less", "GreaterOrEqual",
                  "LessOrEqual", "And", "Or", "Xor"})
    add(op, P::elemwise).emit(E::binary);
  add("Where", P::elemwise).emit(E::select).passes();
  // Activations and math of value_emitter_math.cpp (PRelu's slope: a constant input).
  for (auto op : {"Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu"})
    add(op, P::elemwise).emit(E::unary).epilogue(Ep::unary);
  add("PRelu", P::elemwise).emit(E::binary).epilogue(Ep::unary);
  for (auto op : {"Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "IsNaN", "IsInf"})
    add(op, P::elemwise).emit(E::unary);
  add("Mod", P::elemwise).emit(E::binary);
  // Elementwise math not emitted inline yet.
  for (auto op : {"Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
                  "Sum", "Mean"})
    add(op, P::elemwise);
  // Index maps.
  add("Expand", P::broadcast);
  for (auto op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    add(op, P::injective).index(IndexMap::linear);
  add("Transpose", P::injective).prologue();
  for (auto op : {"Concat", "Slice", "Gather", "Split", "Tile"}) add(op, P::injective);
  // Padding and resampling (value_emitter_resample.cpp): also read through inside a
  // Conv/ConvTranspose gather (candidates.cpp limits them to those heavy ops).
  add("Pad", P::injective).prologue();
  for (auto op : {"Resize", "Upsample"})  // a weighted sum of taps: values are computed
    add(op, P::injective).prologue().flops(FlopsBasis::output, 2).t.passes_value = false;
  // Index maps the ValueEmitter computes (ops_index.cpp's formulas).
  for (auto op : {"DepthToSpace", "SpaceToDepth", "Trilu", "GatherElements"})
    add(op, P::injective);
  // value_emitter_index.cpp: GatherND reads through its indices; scatters (gather form),
  // OneHot and TopK compute each output element with a loop of their own.
  add("GatherND", P::injective);
  for (auto op : {"ScatterND", "ScatterElements", "Scatter"})
    add(op, P::injective).computes().flops(FlopsBasis::output);
  add("OneHot", P::injective).computes();
  add("TopK", P::injective).flops(FlopsBasis::input);
  // Data movement and shape queries.
  for (auto op : {"Shape", "Size", "Constant", "ConstantOfShape", "Range"})
    add(op, P::opaque).no_flops();
  // Reductions and normalisations.
  using A = ReduceAxes;
  for (auto op : {"Softmax", "LogSoftmax"})
    add(op, P::reduce).fp32().flops(FlopsBasis::input, 5).reduces(A::softmax, 2, 2).row_template();
  add("LayerNormalization", P::reduce).fp32().flops(FlopsBasis::input, 8).reduces(A::trailing, 2, 2).row_template();
  add("RMSNormalization", P::reduce).fp32().flops(FlopsBasis::input, 4).reduces(A::trailing, 1, 2).row_template();
  add("GlobalAveragePool", P::reduce).fp32().flops(FlopsBasis::input).reduces(A::spatial, 1, 1).row_template();
  add("GlobalMaxPool", P::reduce).flops(FlopsBasis::input).reduces(A::spatial, 1, 1).row_template();
  for (auto op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                  "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    add(op, P::reduce).fp32().flops(FlopsBasis::input).reduces(A::listed, 1, 1).row_template();
  // Lowered by passes/lower_norms before candidates are made (f32), or computed alone.
  add("InstanceNormalization", P::reduce).fp32().reduces(A::spatial, 2, 2);
  add("LpNormalization", P::reduce).fp32().reduces(A::one, 1, 2);
  add("GlobalLpPool", P::reduce).fp32().reduces(A::spatial, 1, 1);
  add("Hardmax", P::reduce).reduces(A::softmax, 1, 2);
  // ArgMax / ArgMin: a loop over the axis per output element, emitted by the ValueEmitter.
  for (auto op : {"ArgMax", "ArgMin"}) add(op, P::injective).flops(FlopsBasis::input);
  add("CumSum", P::injective).computes().flops(FlopsBasis::input);
  // Lowered by passes/lower_norms before candidates are made.
  add("GroupNormalization", P::opaque).fp32();
  add("LRN", P::opaque).fp32();
  add("BatchNormalization", P::opaque).fp32().flops(FlopsBasis::input, 2);
  // Pools.
  add("MaxPool", P::window);
  add("AveragePool", P::window).fp32();
  add("LpPool", P::window).fp32();
  // Heavy ops.
  for (auto op : {"Conv", "ConvTranspose", "MatMul", "Gemm"})
    add(op, P::heavy).flops(FlopsBasis::contraction, 2);
  // A Conv's weight gradient: the implicit-GEMM template's weight-gradient mode (its FLOPs:
  // node_flops' convolution-gradient rule).
  add("dc.ConvGradWeight", P::heavy).flops(FlopsBasis::contraction, 2);

  std::vector<OpTraits> out;
  for (auto& row : r) out.push_back(row.t);
  return out;
}

}  // namespace

const OpTraits& op_traits(std::string_view op) {
  static const std::map<std::string_view, OpTraits> table = [] {
    std::map<std::string_view, OpTraits> m;
    for (const auto& t : rows()) m.emplace(t.op, t);
    return m;
  }();
  static const OpTraits unknown{};
  auto it = table.find(op);
  return it == table.end() ? unknown : it->second;
}

const std::vector<OpTraits>& all_op_traits() {
  static const std::vector<OpTraits> sorted = [] {
    std::vector<OpTraits> v = rows();
    std::sort(v.begin(), v.end(), [](const OpTraits& a, const OpTraits& b) { return a.op < b.op; });
    return v;
  }();
  return sorted;
}

OpClass op_class(std::string_view op) {
  switch (op_traits(op).pattern) {
    case OpPattern::heavy: return OpClass::heavy;
    case OpPattern::reduce:
    case OpPattern::window: return OpClass::reduction;
    case OpPattern::elemwise:
    case OpPattern::broadcast:
    case OpPattern::injective: return OpClass::injective;
    case OpPattern::opaque: return OpClass::opaque;
  }
  return OpClass::opaque;
}

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::heavy: return "heavy";
    case OpClass::reduction: return "reduction";
    case OpClass::injective: return "injective";
    case OpClass::opaque: return "opaque";
  }
  return "?";
}

bool is_elementwise_math(std::string_view op) {
  return op_traits(op).pattern == OpPattern::elemwise;
}

bool is_emittable(std::string_view op) { return op_traits(op).emit != EmitForm::none; }

bool is_pointwise_op(std::string_view op) {
  const OpTraits& t = op_traits(op);
  return t.emit != EmitForm::none && t.index == IndexMap::same;
}

}  // namespace dc
