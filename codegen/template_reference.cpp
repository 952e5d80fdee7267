// placeholder: being written
#include "generate.h"
#include "ir/error.h"
namespace dc {
GeneratedKernel generate_reference(const Workload&) { throw_internal_error("reference template not written yet"); }
}  // namespace dc
