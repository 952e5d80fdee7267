// A variant key back into its Variant, without enumerating the parameter space.
#pragma once

#include <optional>
#include <string>

#include "gpu/gpu_spec.h"
#include "ir/workload.h"
#include "variant.h"

namespace dc {

// The variant of `key` ("gemm_tiled/fp32/block_k=16,...") for workload w on the GPU: the key
// is parsed, its template, precision and every parameter name checked against the
// workload's family (variant_params.h), and the parameters asked of the family's space
// (param_space_point.h), which recomputes the resources and checks fits_gpu. So
// variant_from_key(v.key(), w, gpu) == v for every v of enumerate_variants(w, gpu), and
// nullopt for any other key, with the reason in *why (malformed, unknown template or
// parameter, a parameter missing or of another path, not a point of this space, too big
// for the GPU). The reference kernel's key is no point of a space.
std::optional<Variant> variant_from_key(const std::string& key, const Workload& w, const GpuSpec& gpu,
                                        std::string* why = nullptr);

// Every field equal: template, precision, parameters and the resources they imply.
bool same_variant(const Variant& a, const Variant& b);

}  // namespace dc
