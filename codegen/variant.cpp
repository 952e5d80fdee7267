#include "variant.h"

#include "ir/error.h"
#include "variant_params.h"

namespace dc {

int64_t Variant::param(const std::string& name) const {
  auto it = params.find(name);
  DC_INTERNAL_CHECK(it != params.end(), "variant ", key(), " has no parameter '", name, "'");
  return it->second;
}

int64_t Variant::param_or(const std::string& name, int64_t dflt) const {
  DC_INTERNAL_CHECK(is_param_name(name), "no template family has a parameter '", name, "' (asked of ", key(),
                    ")");
  auto it = params.find(name);
  return it == params.end() ? dflt : it->second;
}

Variant reference_variant() {
  Variant v;
  v.template_name = kReferenceTemplate;
  v.precision = "fp32";
  return v;
}

bool is_reference_key(const std::string& variant_key) {
  return variant_key.rfind(std::string(kReferenceTemplate) + "/", 0) == 0;
}

bool is_reference(const Variant& v) { return is_reference_key(v.key()); }

std::string variant_key_precision(const std::string& variant_key) {
  const size_t a = variant_key.find('/');
  if (a == std::string::npos) return "";
  const size_t b = variant_key.find('/', a + 1);
  return b == std::string::npos ? "" : variant_key.substr(a + 1, b - a - 1);
}

std::string Variant::key() const {
  // std::map iterates in name order, so the text is canonical without sorting.
  std::string out = template_name + "/" + precision + "/";
  bool first = true;
  for (const auto& [name, value] : params) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += '=';
    out += std::to_string(value);
  }
  return out;
}

}  // namespace dc
