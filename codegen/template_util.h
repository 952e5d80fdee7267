// Pieces every template shares: the buffer list and kernel parameter list of a workload,
// the source header, index helpers.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "ir/kernel.h"
#include "variant.h"

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

// Blocks for `items` work items, `per_block` a block: at least 1, at most INT_MAX (grid.x).
int64_t grid_blocks(int64_t items, int64_t per_block);

// A GeneratedKernel with `source` and one launch of `kernel` (`threads` a block) over every
// workload buffer in order: how every single-kernel template ends.
GeneratedKernel one_launch_kernel(const Workload& w, const Variant& v, std::string source,
                                  const std::string& kernel, std::array<int64_t, 3> grid,
                                  int64_t threads, int64_t dynamic_smem_bytes = 0);

// `extern "C" __global__ void DC_LAUNCH_BOUNDS(<threads>) <name>(<kernel_params(w)>) { <body> }`
// and its export line. `threads`: the launch's block size (ptxas then keeps the registers
// within the block's share, so the launch never fails for registers).
std::string kernel_definition(const Workload& w, const std::string& name, int64_t threads,
                              const std::string& body);

// A grid-stride loop over `chunks` chunks of `vec` adjacent elements: a thread takes `ept`
// chunks per step, `blockDim.x` apart (coalesced). `body` sees `i`, the chunk's first element.
std::string grid_stride_chunks(int64_t chunks, int64_t ept, int64_t vec, const std::string& body);

// Stores of one value per lane to `param`[i + lane]: one float2/float4 store for f32, one
// 32-bit store per pair of lanes for f16/bf16 (dc_pack_f16x2 / dc_pack_bf16x2; `i` even),
// else one store per lane.
std::string store_chunk(const std::string& param, DType dtype, const std::vector<std::string>& lanes);

// "float2" or "float4": the vector type of `vec` floats.
const char* float_vector_type(int64_t vec);

// Input position of tap `k` of the window of output coordinate `o`, without the zero
// terms ("o * 2 - 1 + k", not "o * 2 - 1 + k * 1").
std::string tap_position(const std::string& o, int64_t stride, int64_t pad, const std::string& k,
                         int64_t dilation);

// InternalError unless `v` is a variant of template `name` and, with `fp32_only`, of
// precision fp32 (templates without another path).
void check_variant(const Variant& v, const std::string& name, bool fp32_only = false);

// The one node of `w` that `is_main` accepts, every other node injective (computed by the
// ValueEmitter): what a single-op template checks first. InternalError otherwise, naming
// the template and `what` the main node is ("window pool").
const Node& single_main_node(const Workload& w, const std::string& template_name,
                             const std::string& what, const std::function<bool(const Node&)>& is_main);

}  // namespace dc
