// Parameter space of the output-parallel templates: elementwise/injective chains, pooling
// windows and the generic kernel. A thread computes elems_per_thread vectors of vec
// adjacent outputs (independent loads in flight: what hides DRAM latency), in blocks of
// `threads`. The generic kernel has one point, 256 threads of one element each, and a
// multi-tensor optimizer update a second: float4s (template_optimizer.h).
#include <algorithm>

#include "param_space.h"
#include "param_space_point.h"

namespace dc {

namespace {

const std::vector<int64_t> kThreads = {128, 256, 512};
const std::vector<int64_t> kElemsPerThread = {1, 2, 4, 8};
const std::vector<int64_t> kVecs = {1, 2, 4};

}  // namespace

std::optional<Variant> output_parallel_point(const WorkloadShape& s, const GpuSpec& gpu, const OutputParams& p,
                                             std::string* why) {
  if (s.elements <= 0) return refuse(why, "the workload has no outputs");
  const int64_t threads = p.threads, ept = p.elems_per_thread, vec = p.vec;
  if (!offered(kThreads, threads, "threads", why) || !offered(kElemsPerThread, ept, "elems_per_thread", why) ||
      !offered(kVecs, vec, "vec", why))
    return std::nullopt;
  const bool generic = s.family == Family::opaque;
  if (generic && s.optimizer_update && threads == 256 && ept == 1 && vec == 4) {
    // The update's tensors each end with their own scalar tail: no alignment needed.
  } else if (vec > s.vec_align) {
    return refuse(why, "vec=", vec, ", but the outputs align to ", s.vec_align);
  }
  if (generic && (threads != 256 || ept != 1 || (vec != 1 && !(vec == 4 && s.optimizer_update))))
    return refuse(why, "the generic kernel runs 256 threads of one element (an optimizer update's of a float4)");
  const int64_t cap = std::max<int64_t>(128, pow2_ceil(s.elements));
  if (!generic && threads * ept * vec > cap)
    return refuse(why, "a block of ", threads * ept * vec, " elements for ", s.elements, " outputs");
  Variant v;
  v.template_name = family_template_name(s.family);
  write_params(p, kEveryPath, v);
  v.threads_per_block = static_cast<int>(threads);
  v.smem_bytes = 0;
  v.regs_per_thread = static_cast<int>(16 + ept * vec * (s.inputs + 1));
  v.grid_blocks = ceil_div(s.elements, threads * ept * vec);
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

std::vector<Variant> enumerate_output_parallel(const WorkloadShape& s, const GpuSpec& gpu) {
  std::vector<Variant> out;
  if (s.elements <= 0) return out;
  for (int64_t threads : kThreads)
    for (int64_t ept : kElemsPerThread)
      for (int64_t vec : kVecs)
        if (auto v = output_parallel_point(s, gpu, {threads, ept, vec}, nullptr)) out.push_back(std::move(*v));
  return out;
}

}  // namespace dc
