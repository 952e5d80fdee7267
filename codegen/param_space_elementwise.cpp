// Parameter space of the output-parallel templates: elementwise/injective chains, pooling
// windows and the generic kernel. A thread computes elems_per_thread vectors of vec
// adjacent outputs (independent loads in flight: what hides DRAM latency), in blocks of
// `threads`.
#include <algorithm>

#include "param_space.h"

namespace dc {

std::vector<Variant> enumerate_output_parallel(const WorkloadShape& s, const GpuSpec& gpu) {
  std::vector<Variant> out;
  if (s.elements <= 0) return out;
  const bool generic = s.family == Family::opaque;
  const int64_t cap = std::max<int64_t>(128, pow2_ceil(s.elements));
  for (int64_t threads : {128, 256, 512})
    for (int64_t ept : {1, 2, 4, 8})
      for (int64_t vec : {1, 2, 4}) {
        if (vec > s.vec_align) continue;
        if (generic && (threads != 256 || ept != 1 || vec != 1)) continue;
        if (!generic && threads * ept * vec > cap) continue;  // a block beyond the whole output
        Variant v;
        v.template_name = family_template_name(s.family);
        v.params = {{"threads", threads}, {"elems_per_thread", ept}, {"vec", vec}};
        v.threads_per_block = static_cast<int>(threads);
        v.smem_bytes = 0;
        v.regs_per_thread = static_cast<int>(16 + ept * vec * (s.inputs + 1));
        v.grid_blocks = ceil_div(s.elements, threads * ept * vec);
        if (fits_gpu(v, gpu)) out.push_back(std::move(v));
      }
  return out;
}

}  // namespace dc
