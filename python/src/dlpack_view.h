// A DLPack capsule ("dltensor", DLPack 0.6 ABI: DLManagedTensor) viewing a plan's CUDA
// buffer, for the zero-copy path: torch.utils.dlpack.from_dlpack(capsule) is a tensor on the
// same memory. The few structs are written out here (they are DLPack's stable ABI) rather
// than taken from a dlpack package, which would be one more build dependency.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dcrt.h"

namespace dlpack {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2 };
enum TypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // NULL: compact row-major
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

}  // namespace dlpack

namespace {

// dc's dtype names (common/ir/dtype.cpp) as DLPack types.
inline dlpack::DataType dlpack_dtype(const std::string& dc) {
  if (dc == "f32") return {dlpack::kDLFloat, 32, 1};
  if (dc == "f16") return {dlpack::kDLFloat, 16, 1};
  if (dc == "f64") return {dlpack::kDLFloat, 64, 1};
  if (dc == "bf16") return {dlpack::kDLBfloat, 16, 1};
  if (dc == "i64") return {dlpack::kDLInt, 64, 1};
  if (dc == "i32") return {dlpack::kDLInt, 32, 1};
  if (dc == "i16") return {dlpack::kDLInt, 16, 1};
  if (dc == "i8") return {dlpack::kDLInt, 8, 1};
  if (dc == "u8") return {dlpack::kDLUInt, 8, 1};
  if (dc == "bool") return {dlpack::kDLBool, 8, 1};
  throw std::invalid_argument("dtype " + dc + " has no DLPack equivalent here");
}

// The managed tensor owns its shape array; the memory belongs to the plan.
struct ViewHolder {
  dlpack::ManagedTensor managed{};
  int64_t shape[DCRT_MAX_RANK] = {};
};

inline void delete_view(dlpack::ManagedTensor* self) {
  delete static_cast<ViewHolder*>(self->manager_ctx);
}

inline void capsule_destructor(PyObject* capsule) {
  // A consumer that took the tensor renames the capsule "used_dltensor" and calls the
  // deleter itself; an unused capsule still owns its tensor.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  }
}

inline pybind11::object dlpack_cuda_view(void* ptr, int device, const dcrt_tensor_info& info) {
  auto* h = new ViewHolder;
  h->managed.manager_ctx = h;
  h->managed.deleter = delete_view;
  dlpack::Tensor& t = h->managed.dl_tensor;
  try {
    t.dtype = dlpack_dtype(info.dtype);
  } catch (...) {
    delete h;
    throw;
  }
  t.data = ptr;
  t.device = {dlpack::kDLCUDA, device};
  t.ndim = info.rank;
  std::memcpy(h->shape, info.dims, sizeof(h->shape));
  t.shape = h->shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  PyObject* capsule = PyCapsule_New(&h->managed, "dltensor", capsule_destructor);
  if (capsule == nullptr) {
    delete h;
    throw pybind11::error_already_set();
  }
  return pybind11::reinterpret_steal<pybind11::object>(capsule);
}

}  // namespace
