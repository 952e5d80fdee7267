// placeholder: being written
#include "generate.h"
#include "ir/error.h"
namespace dc {
GeneratedKernel generate_pool(const Workload&, const Variant&) { throw_internal_error("template pool not written yet"); }
}  // namespace dc
