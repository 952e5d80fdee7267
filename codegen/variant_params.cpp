#include "variant_params.h"

#include <map>
#include <set>

#include "param_space.h"

namespace dc {

const std::vector<ParamField<GemmParams>>& GemmParams::fields() {
  using P = GemmParams;
  static const std::vector<ParamField<P>> f = {
      {"block_m", &P::block_m, kEveryPath},      {"block_n", &P::block_n, kEveryPath},
      {"block_k", &P::block_k, kEveryPath},      {"warp_m", &P::warp_m, kEveryPath},
      {"warp_n", &P::warp_n, kEveryPath},        {"thread_m", &P::thread_m, kCudaCorePath},
      {"thread_n", &P::thread_n, kCudaCorePath}, {"vec", &P::vec, kEveryPath},
      {"stages", &P::stages, kEveryPath},        {"split_k", &P::split_k, kEveryPath},
      {"m8n8k4", &P::m8n8k4, kVoltaPath},
  };
  return f;
}

GemmParams GemmParams::of(const Variant& v) { return read_params(v, GemmParams{}); }

const std::vector<ParamField<DepthwiseParams>>& DepthwiseParams::fields() {
  using P = DepthwiseParams;
  static const std::vector<ParamField<P>> f = {
      {"tile_h", &P::tile_h, kEveryPath},
      {"tile_w", &P::tile_w, kEveryPath},
      {"block_c", &P::block_c, kEveryPath},
      {"pixels_per_thread", &P::pixels_per_thread, kEveryPath},
  };
  return f;
}

DepthwiseParams DepthwiseParams::of(const Variant& v) { return read_params(v, DepthwiseParams{}); }

const std::vector<ParamField<AttentionParams>>& AttentionParams::fields() {
  using P = AttentionParams;
  static const std::vector<ParamField<P>> f = {
      {"block_m", &P::block_m, kEveryPath | kAttentionBackwardMmaPath},
      {"block_n", &P::block_n, kEveryPath | kAttentionBackwardMmaPath},
      {"threads", &P::threads, kCudaCorePath}, {"vec", &P::vec, kCudaCorePath},
      {"warp_m", &P::warp_m, kMmaPaths},     {"split_kv", &P::split_kv, kMmaPaths},
      {"stages", &P::stages, kEveryPath},    {"m8n8k4", &P::m8n8k4, kVoltaPath},
      {"thread_m", &P::thread_m, kAttentionBackwardPath}, {"thread_n", &P::thread_n, kAttentionBackwardPath},
  };
  return f;
}

AttentionParams AttentionParams::of(const Variant& v) {
  AttentionParams defaults;
  if (v.precision != "fp32") defaults.stages = 2;
  return read_params(v, defaults);
}

const std::vector<ParamField<ReductionParams>>& ReductionParams::fields() {
  using P = ReductionParams;
  static const std::vector<ParamField<P>> f = {
      {"threads_per_row", &P::threads_per_row, kEveryPath},
      {"rows_per_block", &P::rows_per_block, kEveryPath},
      {"vec", &P::vec, kEveryPath},
      {"cache", &P::cache, kEveryPath},
  };
  return f;
}

ReductionParams ReductionParams::of(const Variant& v) { return read_params(v, ReductionParams{}); }

const std::vector<ParamField<OutputParams>>& OutputParams::fields() {
  using P = OutputParams;
  static const std::vector<ParamField<P>> f = {
      {"threads", &P::threads, kEveryPath},
      {"elems_per_thread", &P::elems_per_thread, kEveryPath},
      {"vec", &P::vec, kEveryPath},
  };
  return f;
}

OutputParams OutputParams::of(const Variant& v) { return read_params(v, OutputParams{}); }

namespace {

template <class P>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const auto& f : P::fields()) out.push_back(f.name);
  return out;
}

}  // namespace

const std::vector<std::string>* template_param_names(const std::string& template_name) {
  static const std::map<std::string, std::vector<std::string>> names = {
      {family_template_name(Family::gemm), names_of<GemmParams>()},
      {family_template_name(Family::conv), names_of<GemmParams>()},
      {family_template_name(Family::depthwise), names_of<DepthwiseParams>()},
      {family_template_name(Family::attention), names_of<AttentionParams>()},
      {kAttentionBackwardTemplate, names_of<AttentionParams>()},
      {family_template_name(Family::reduction), names_of<ReductionParams>()},
      {family_template_name(Family::pool_window), names_of<OutputParams>()},
      {family_template_name(Family::elementwise), names_of<OutputParams>()},
      {family_template_name(Family::opaque), names_of<OutputParams>()},
  };
  const auto it = names.find(template_name);
  return it == names.end() ? nullptr : &it->second;
}

bool is_param_name(const std::string& name) {
  static const std::set<std::string> all = [] {
    std::set<std::string> out;
    for (const auto& names : {names_of<GemmParams>(), names_of<DepthwiseParams>(), names_of<AttentionParams>(),
                              names_of<ReductionParams>(), names_of<OutputParams>()})
      out.insert(names.begin(), names.end());
    return out;
  }();
  return all.count(name) != 0;
}

}  // namespace dc
