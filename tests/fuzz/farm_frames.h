// The farm-codec fuzz input (fuzz_farm_codec.cpp, make_frame_seeds.cpp): a sequence of
// frames, each [tag: 1 byte][length: 2 bytes, little-endian][that many bytes]. Tag bit 7:
// a frame the worker reads (from the coordinator), else one the broker reads (from worker
// tag % 3); bits 4..6: seconds the broker's clock moves on before the frame.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "farm.h"
#include "ir/kernel.h"
#include "variant.h"

namespace dc::fuzz {

struct Frame {
  uint8_t tag = 0;
  std::string_view bytes;
  bool to_worker() const { return (tag & 0x80) != 0; }
  int worker() const { return tag % 3; }
  int advance_s() const { return (tag >> 4) & 7; }
};

// The next frame of `in` (consumed), false at the end or on a truncated header.
inline bool next_frame(std::string_view* in, Frame* f) {
  if (in->size() < 3) return false;
  f->tag = static_cast<uint8_t>((*in)[0]);
  const size_t n = static_cast<uint8_t>((*in)[1]) | (size_t{static_cast<uint8_t>((*in)[2])} << 8);
  in->remove_prefix(3);
  f->bytes = in->substr(0, n);
  in->remove_prefix(f->bytes.size());
  return true;
}

inline std::string pack_frame(uint8_t tag, const std::string& bytes) {
  const size_t n = bytes.size() < 0xffff ? bytes.size() : 0xffff;
  std::string out{static_cast<char>(tag), static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
  return out + bytes.substr(0, n);
}

// The two jobs the harness queues (and the seeds answer): small, valid kernels.
inline GeneratedKernel small_kernel(const std::string& key) {
  GeneratedKernel k;
  k.template_name = key == "reference" ? "reference" : "fuzz";
  k.variant_key = key;
  k.source = "extern \"C\" __global__ void k(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }\n";
  k.buffers = {{"t0", BufferRole::input, DType::f32, {64}, false},
               {"t1", BufferRole::output, DType::f32, {64}, false}};
  Launch l;
  l.kernel = "k";
  l.grid = {1, 1, 1};
  l.block = {64, 1, 1};
  l.args = {0, 1};
  k.launches = {l};
  return k;
}

inline FarmJob small_job(const std::string& id) {
  FarmJob j;
  j.job_id = id;
  j.gpu_type = "h100";
  j.workload = "copy64";
  j.variant_kernel = small_kernel("var-" + id);
  j.reference = small_kernel("reference");
  j.seed = 7;
  return j;
}

}  // namespace dc::fuzz
