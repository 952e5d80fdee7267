// placeholder: being written
#include "generate.h"
#include "ir/error.h"
namespace dc {
GeneratedKernel generate_reduction(const Workload&, const Variant&) { throw_internal_error("template reduction not written yet"); }
}  // namespace dc
