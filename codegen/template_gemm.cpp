// placeholder: being written
#include "generate.h"
#include "ir/error.h"
namespace dc {
GeneratedKernel generate_gemm(const Workload&, const Variant&) { throw_internal_error("template gemm not written yet"); }
}  // namespace dc
