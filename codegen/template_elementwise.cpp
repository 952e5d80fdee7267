// placeholder: being written
#include "generate.h"
#include "ir/error.h"
namespace dc {
GeneratedKernel generate_elementwise(const Workload&, const Variant&) { throw_internal_error("template elementwise not written yet"); }
}  // namespace dc
