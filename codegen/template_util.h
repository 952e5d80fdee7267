// Pieces every template shares: the buffer list and kernel parameter list of a workload,
// the source header, index helpers.
#pragma once

#include <string>
#include <vector>

#include "kernel.h"

namespace dc {

// Workload inputs (graph input order, role input) then outputs (role output): the buffers
// of every generated kernel before any scratch.
std::vector<KernelBuffer> workload_buffers(const Workload& w);

// "const float* DC_RESTRICT in0, ..., float* DC_RESTRICT out0" for the workload's buffers
// (names in0.. / out0.. as ValueEmitter uses them); `extra` appends more parameters.
std::string kernel_params(const Workload& w, const std::vector<std::string>& extra = {});

// A GeneratedKernel named after the variant, with the workload's buffers; the template adds
// the source and the launches.
GeneratedKernel start_kernel(const Workload& w, const Variant& v);

// Argument indices 0..n-1 for a launch that takes every workload buffer in order.
std::vector<int> all_workload_args(const Workload& w);

// Start of every source: a comment naming template, variant and workload, then the prelude.
std::string source_header(const Workload& w, const std::string& template_name,
                          const std::string& variant_key);

// C statements that split a linear index `lin` into coordinates c0..c{r-1} of `shape`,
// declaring `const dc_i64 <prefix><d>`; returns the coordinate names.
std::vector<std::string> emit_unravel(const Shape& shape, const std::string& lin,
                                      const std::string& prefix, std::string& code);

int64_t ceil_div(int64_t a, int64_t b);

}  // namespace dc
