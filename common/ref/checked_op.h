// OpDefs whose kernel first re-runs the op's import-time check on the actual input values,
// so that a kernel called directly (tests, constant folding) refuses what import refuses.
#pragma once

#include <string_view>
#include <vector>

#include "ref/kernel.h"

namespace dc::ref {

// The TensorInfos of run-time values, in the form CheckFn takes.
struct InfoView {
  std::vector<TensorInfo> infos;
  std::vector<const TensorInfo*> ptrs;  // null for an absent optional input
};

inline InfoView infos_of(const Inputs& in) {
  InfoView v;
  v.infos.reserve(in.size());
  for (const Tensor& t : in) v.infos.push_back({t.dtype(), t.shape()});
  for (size_t i = 0; i < in.size(); ++i) v.ptrs.push_back(in[i].defined() ? &v.infos[i] : nullptr);
  return v;
}

template <CheckFn Check, KernelFn Run>
std::vector<Tensor> checked(const Node& n, const Inputs& in) {
  const InfoView v = infos_of(in);
  Check(n, v.ptrs);
  return Run(n, in);
}

template <CheckFn Check, KernelFn Run>
constexpr OpDef op_def(std::string_view op) {
  return {op, &checked<Check, Run>, Check};
}

}  // namespace dc::ref
