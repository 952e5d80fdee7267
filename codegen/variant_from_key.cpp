// Variant::from_key: a variant key back into the Variant, without enumerating the space.
// The key is parsed, its names are checked against the family's typed parameters
// (variant_params.h), and the family's *_point function (param_space_*.cpp, the one rule
// the enumerators also keep their variants by) decides membership and the resources.
#include "variant.h"

#include <algorithm>
#include <charconv>

#include "param_space.h"
#include "param_space_point.h"
#include "variant_params.h"

namespace dc {

namespace {

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

// The family's typed parameters from the key's: every name the family's, carried by the
// variants of `path`, and none of the path's missing.
template <class P>
std::optional<P> typed_params(const VariantKeyParts& k, unsigned path, std::string* why) {
  P p;
  for (const auto& [name, value] : k.params) {
    const ParamField<P>* field = nullptr;
    for (const auto& f : P::fields())
      if (name == f.name) field = &f;
    if (!field) return refuse(why, "template ", k.template_name, " has no parameter '", name, "'");
    if (!(field->paths & path))
      return refuse(why, "parameter '", name, "' is not one of ", k.template_name, "/", k.precision, "'s");
    p.*(field->member) = value;
  }
  for (const auto& f : P::fields())
    if ((f.paths & path) && !k.params.count(f.name))
      return refuse(why, "missing parameter '", f.name, "' of ", k.template_name, "/", k.precision);
  return p;
}

std::optional<Variant> family_point(const WorkloadShape& s, const GpuSpec& gpu, const VariantKeyParts& k,
                                    std::string* why) {
  const bool volta = gpu.cc_major == 7 && gpu.cc_minor < 5;
  // attention_backward's fp32 variants also carry their thread tile, its tensor-core ones
  // only their tiles (variant_params.h).
  const bool backward = k.template_name == kAttentionBackwardTemplate;
  const unsigned path = !backward              ? param_path(k.precision, volta)
                        : k.precision == "fp32" ? kCudaCorePath | kAttentionBackwardPath
                                                : kAttentionBackwardMmaPath;
  if (s.family != Family::gemm && s.family != Family::conv && s.family != Family::attention &&
      k.precision != "fp32")
    return refuse(why, k.template_name, " has only the fp32 path, not ", k.precision);
  switch (s.family) {
    case Family::gemm:
    case Family::conv:
      if (auto p = typed_params<GemmParams>(k, path, why)) return gemm_point(s, gpu, k.precision, *p, why);
      return std::nullopt;
    case Family::depthwise:
      if (auto p = typed_params<DepthwiseParams>(k, path, why)) return depthwise_point(s, gpu, *p, why);
      return std::nullopt;
    case Family::attention:
      if (auto p = typed_params<AttentionParams>(k, path, why)) return attention_point(s, gpu, k.precision, *p, why);
      return std::nullopt;
    case Family::reduction:
      if (auto p = typed_params<ReductionParams>(k, path, why)) return reduction_point(s, gpu, *p, why);
      return std::nullopt;
    case Family::pool_window:
    case Family::elementwise:
    case Family::opaque:
      if (auto p = typed_params<OutputParams>(k, path, why)) return output_parallel_point(s, gpu, *p, why);
      return std::nullopt;
  }
  return refuse(why, "unknown family");
}

}  // namespace

std::optional<VariantKeyParts> parse_variant_key(const std::string& key, std::string* why) {
  const auto malformed = [&](const std::string& what) {
    return refuse(why, "malformed variant key '", key, "' (", what, "; expected TEMPLATE/PRECISION/NAME=VALUE,...)");
  };
  const size_t a = key.find('/');
  const size_t b = a == std::string::npos ? a : key.find('/', a + 1);
  if (b == std::string::npos) return malformed("fewer than two '/'");
  VariantKeyParts out;
  out.template_name = key.substr(0, a);
  out.precision = key.substr(a + 1, b - a - 1);
  if (out.template_name.empty() || out.precision.empty()) return malformed("empty template or precision");
  const std::string rest = key.substr(b + 1);
  for (size_t at = 0; !rest.empty();) {
    const size_t end = rest.find(',', at);
    const std::string item = rest.substr(at, end == std::string::npos ? end : end - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return malformed("parameter '" + item + "' is not NAME=VALUE");
    const std::string name = item.substr(0, eq);
    if (!std::all_of(name.begin(), name.end(), is_name_char)) return malformed("parameter name '" + name + "'");
    int64_t value = 0;
    const char* first = item.data() + eq + 1;
    const char* last = item.data() + item.size();
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec != std::errc() || ptr != last || first == last) return malformed("value of '" + name + "' is not an integer");
    if (!out.params.emplace(name, value).second) return malformed("parameter '" + name + "' twice");
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

std::optional<Variant> Variant::from_key(const std::string& key, const Workload& w, const GpuSpec& gpu,
                                         std::string* why) {
  const std::optional<VariantKeyParts> k = parse_variant_key(key, why);
  if (!k) return std::nullopt;
  if (!template_param_names(k->template_name))
    return refuse(why, "unknown template '", k->template_name, "' in variant key '", key, "'");
  const WorkloadShape s = analyze_workload(w);
  const char* expected = s.attention_backward ? kAttentionBackwardTemplate : family_template_name(s.family);
  if (k->template_name != expected)
    return refuse(why, "workload ", w.signature, " is computed by ", expected, ", not ", k->template_name);
  if (!is_precision_path(k->precision)) return refuse(why, "unknown precision '", k->precision, "'");
  if (!gpu_has_precision(gpu, k->precision)) return refuse(why, "no ", k->precision, " path on ", gpu.sm_arch());
  std::optional<Variant> v = family_point(s, gpu, *k, why);
  if (v && v->key() != key) return refuse(why, "variant key '", key, "' is not canonical: '", v->key(), "'");
  return v;
}

}  // namespace dc
