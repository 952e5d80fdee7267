// The one rule of each family's parameter space (param_space_{gemm,attention,reduction,
// elementwise}.cpp): its *_point function says whether typed parameters are a point of the
// space for workload s on the GPU (each value one of the choices the enumerator loops over,
// the constraints between them, fits_gpu) and returns the variant with the resources they
// imply; nullopt otherwise, with the reason in *why when why is not null. The enumerators
// loop over each family's choices and keep the points; Variant::from_key
// (variant_from_key.cpp) parses a key and asks the same function, without enumerating.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_spec.h"
#include "ir/error.h"
#include "param_space.h"
#include "variant.h"
#include "variant_params.h"

namespace dc {

std::optional<Variant> gemm_point(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                  const GemmParams& p, std::string* why);
std::optional<Variant> depthwise_point(const WorkloadShape& s, const GpuSpec& gpu, const DepthwiseParams& p,
                                       std::string* why);
std::optional<Variant> attention_point(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                       const AttentionParams& p, std::string* why);
std::optional<Variant> reduction_point(const WorkloadShape& s, const GpuSpec& gpu, const ReductionParams& p,
                                       std::string* why);
std::optional<Variant> output_parallel_point(const WorkloadShape& s, const GpuSpec& gpu, const OutputParams& p,
                                             std::string* why);

// fp32, tf32, fp16 or bf16: the precision paths there are.
bool is_precision_path(const std::string& precision);

// nullopt, with the reason in *why when asked (the text is built only then: the
// enumerators pass nullptr).
template <class... Args>
std::nullopt_t refuse(std::string* why, const Args&... args) {
  if (why) *why = str_cat(args...);
  return std::nullopt;
}

inline bool contains(const std::vector<int64_t>& choices, int64_t value) {
  return std::find(choices.begin(), choices.end(), value) != choices.end();
}
// Whether `value` is one of the choices; otherwise the reason in *why.
bool offered(const std::vector<int64_t>& choices, int64_t value, const char* name, std::string* why);

}  // namespace dc
