// libdcrt's C API (dcrt.h) over dc::rt::Runtime. Every entry point catches every exception:
// a UserError becomes the status that fits the call, std::bad_alloc DCRT_ERROR_OUT_OF_MEMORY,
// anything else DCRT_ERROR_INTERNAL; the message goes to the thread's last error.
#include "dcrt.h"

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "ir/error.h"
#include "runtime.h"

struct dcrt_plan {
  dc::rt::Runtime runtime;
  bool emulated = false;
  std::string device;
  std::vector<bool> input_set;  // parallel to the plan's inputs
  bool ran = false;
};

namespace {

thread_local std::string t_last_error;

dcrt_status fail(dcrt_status status, const char* message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();  // no memory for the message: the status still says what failed
  }
  return status;
}

// Runs `body` (which returns a status), turning exceptions into statuses: a UserError into
// `user_status`, the one that fits the call.
template <class Body>
dcrt_status guarded(dcrt_status user_status, Body&& body) noexcept {
  try {
    return body();
  } catch (const dc::UserError& e) {
    return fail(user_status, e.what());
  } catch (const std::bad_alloc&) {
    return fail(DCRT_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    try {
      return fail(DCRT_ERROR_INTERNAL,
                  (std::string("internal error (a bug in dc, please report): ") + e.what()).c_str());
    } catch (...) {
      return fail(DCRT_ERROR_INTERNAL, "internal error (a bug in dc, please report)");
    }
  } catch (...) {
    return fail(DCRT_ERROR_INTERNAL, "internal error: an unknown exception (a bug in dc, please report)");
  }
}

dcrt_status null_argument(const char* function) {
  return fail(DCRT_ERROR_INVALID_ARGUMENT,
              (std::string(function) + ": a required pointer argument is NULL").c_str());
}

dcrt_status fill_info(const dc::PlanTensor& t, dcrt_tensor_info* info) {
  if (t.shape.size() > DCRT_MAX_RANK)
    return fail(DCRT_ERROR_INVALID_ARGUMENT,
                dc::str_cat("tensor '", t.name, "' has rank ", t.shape.size(),
                            ", more than DCRT_MAX_RANK (", DCRT_MAX_RANK, ")")
                    .c_str());
  info->name = t.name.c_str();
  info->dtype = dc::dtype_name(t.dtype).data();  // string literals: NUL-terminated
  info->rank = static_cast<int>(t.shape.size());
  std::fill(std::begin(info->dims), std::end(info->dims), int64_t{0});
  std::copy(t.shape.begin(), t.shape.end(), info->dims);
  info->bytes = static_cast<size_t>(dc::shape_numel(t.shape)) * dc::dtype_size(t.dtype);
  return DCRT_OK;
}

// The first input never set, or -1.
long first_unset_input(const dcrt_plan& p) {
  const auto it = std::find(p.input_set.begin(), p.input_set.end(), false);
  return it == p.input_set.end() ? -1 : static_cast<long>(it - p.input_set.begin());
}

dcrt_status not_ready_unset(const dcrt_plan& p, long index, const char* what) {
  return fail(DCRT_ERROR_NOT_READY,
              dc::str_cat("input '", p.runtime.input_info(static_cast<size_t>(index)).name,
                          "' was never set: set every input before ", what)
                  .c_str());
}

}  // namespace

extern "C" {

dcrt_options dcrt_default_options(void) {
  dcrt_options o;
  o.emulate = 0;
  o.device = 0;
  o.cache_dir = nullptr;
  return o;
}

const char* dcrt_status_name(dcrt_status status) {
  switch (status) {
    case DCRT_OK: return "DCRT_OK";
    case DCRT_ERROR_INVALID_ARGUMENT: return "DCRT_ERROR_INVALID_ARGUMENT";
    case DCRT_ERROR_LOAD: return "DCRT_ERROR_LOAD";
    case DCRT_ERROR_NOT_READY: return "DCRT_ERROR_NOT_READY";
    case DCRT_ERROR_RUN: return "DCRT_ERROR_RUN";
    case DCRT_ERROR_UNSUPPORTED: return "DCRT_ERROR_UNSUPPORTED";
    case DCRT_ERROR_OUT_OF_MEMORY: return "DCRT_ERROR_OUT_OF_MEMORY";
    case DCRT_ERROR_INTERNAL: return "DCRT_ERROR_INTERNAL";
  }
  return "DCRT_ERROR_UNKNOWN";
}

const char* dcrt_last_error(void) { return t_last_error.c_str(); }

dcrt_status dcrt_load(const char* dir, const dcrt_options* options, dcrt_plan** plan) {
  if (plan != nullptr) *plan = nullptr;
  return guarded(DCRT_ERROR_LOAD, [&] {
    if (dir == nullptr || plan == nullptr) return null_argument("dcrt_load");
    const dcrt_options o = options != nullptr ? *options : dcrt_default_options();
    DC_USER_CHECK(o.device >= 0, "device ", o.device, " is not a CUDA device ordinal");
    dc::rt::RuntimeOptions ro;
    ro.emulate = o.emulate != 0;
    ro.device = o.device;
    ro.cache_dir = o.cache_dir != nullptr ? o.cache_dir : "";
    auto p = std::make_unique<dcrt_plan>(dcrt_plan{dc::rt::Runtime::open(dir, ro), ro.emulate, {}, {}, false});
    p->device = p->runtime.device_description();
    p->input_set.assign(p->runtime.num_inputs(), false);
    *plan = p.release();
    return DCRT_OK;
  });
}

void dcrt_free(dcrt_plan* plan) {
  try {
    delete plan;
  } catch (...) {  // destructors release device memory; a failure there has no one to tell
  }
}

dcrt_status dcrt_num_inputs(const dcrt_plan* plan, size_t* count) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || count == nullptr) return null_argument("dcrt_num_inputs");
    *count = plan->runtime.num_inputs();
    return DCRT_OK;
  });
}

dcrt_status dcrt_num_outputs(const dcrt_plan* plan, size_t* count) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || count == nullptr) return null_argument("dcrt_num_outputs");
    *count = plan->runtime.num_outputs();
    return DCRT_OK;
  });
}

dcrt_status dcrt_input_info(const dcrt_plan* plan, size_t index, dcrt_tensor_info* info) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || info == nullptr) return null_argument("dcrt_input_info");
    return fill_info(plan->runtime.input_info(index), info);
  });
}

dcrt_status dcrt_output_info(const dcrt_plan* plan, size_t index, dcrt_tensor_info* info) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || info == nullptr) return null_argument("dcrt_output_info");
    return fill_info(plan->runtime.output_info(index), info);
  });
}

dcrt_status dcrt_set_input(dcrt_plan* plan, size_t index, const void* data, size_t bytes) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || data == nullptr) return null_argument("dcrt_set_input");
    plan->runtime.set_input(index, data, bytes);
    plan->input_set[index] = true;
    return DCRT_OK;
  });
}

dcrt_status dcrt_run(dcrt_plan* plan) {
  return guarded(DCRT_ERROR_RUN, [&] {
    if (plan == nullptr) return null_argument("dcrt_run");
    const long unset = first_unset_input(*plan);
    if (unset >= 0) return not_ready_unset(*plan, unset, "dcrt_run");
    plan->runtime.run();
    plan->ran = true;
    return DCRT_OK;
  });
}

dcrt_status dcrt_is_training(const dcrt_plan* plan, int* training) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || training == nullptr) return null_argument("dcrt_is_training");
    *training = plan->runtime.plan().training ? 1 : 0;
    return DCRT_OK;
  });
}

dcrt_status dcrt_train_step(dcrt_plan* plan) {
  return guarded(DCRT_ERROR_RUN, [&] {
    if (plan == nullptr) return null_argument("dcrt_train_step");
    if (!plan->runtime.plan().training)
      return fail(DCRT_ERROR_UNSUPPORTED, "dcrt_train_step: this plan computes inference, not a training step");
    const long unset = first_unset_input(*plan);
    if (unset >= 0) return not_ready_unset(*plan, unset, "dcrt_train_step");
    plan->runtime.train_step();
    plan->ran = true;
    return DCRT_OK;
  });
}

dcrt_status dcrt_num_states(const dcrt_plan* plan, size_t* count) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || count == nullptr) return null_argument("dcrt_num_states");
    *count = plan->runtime.num_states();
    return DCRT_OK;
  });
}

dcrt_status dcrt_state_info(const dcrt_plan* plan, size_t index, dcrt_tensor_info* info) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || info == nullptr) return null_argument("dcrt_state_info");
    return fill_info(plan->runtime.state_info(index), info);
  });
}

dcrt_status dcrt_get_state(const dcrt_plan* plan, size_t index, void* data, size_t bytes) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || data == nullptr) return null_argument("dcrt_get_state");
    plan->runtime.get_state(index, data, bytes);
    return DCRT_OK;
  });
}

dcrt_status dcrt_set_state(dcrt_plan* plan, size_t index, const void* data, size_t bytes) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || data == nullptr) return null_argument("dcrt_set_state");
    plan->runtime.set_state(index, data, bytes);
    return DCRT_OK;
  });
}

dcrt_status dcrt_get_output(const dcrt_plan* plan, size_t index, void* data, size_t bytes) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || data == nullptr) return null_argument("dcrt_get_output");
    const dc::PlanTensor& out = plan->runtime.output_info(index);
    if (!plan->ran)
      return fail(DCRT_ERROR_NOT_READY,
                  dc::str_cat("output '", out.name, "' has no value yet: call dcrt_run first").c_str());
    plan->runtime.get_output(index, data, bytes);
    return DCRT_OK;
  });
}

dcrt_status dcrt_time_runs(dcrt_plan* plan, int warmup, int runs, double* samples_us) {
  return guarded(DCRT_ERROR_RUN, [&] {
    if (warmup < 0 || runs < 1)
      return fail(DCRT_ERROR_INVALID_ARGUMENT,
                  dc::str_cat("dcrt_time_runs: need runs >= 1 and warmup >= 0 (got runs ", runs,
                              ", warmup ", warmup, ")")
                      .c_str());
    if (plan == nullptr || samples_us == nullptr) return null_argument("dcrt_time_runs");
    if (plan->emulated)
      return fail(DCRT_ERROR_UNSUPPORTED, "the host emulator has no timing; run on a GPU");
    const long unset = first_unset_input(*plan);
    if (unset >= 0) return not_ready_unset(*plan, unset, "dcrt_time_runs");
    const std::vector<double> samples = plan->runtime.time_runs(warmup, runs);
    DC_INTERNAL_CHECK(samples.size() == static_cast<size_t>(runs), samples.size(), " samples for ",
                      runs, " runs");
    std::copy(samples.begin(), samples.end(), samples_us);
    plan->ran = true;
    return DCRT_OK;
  });
}

dcrt_status dcrt_device_description(const dcrt_plan* plan, const char** description) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || description == nullptr) return null_argument("dcrt_device_description");
    *description = plan->device.c_str();
    return DCRT_OK;
  });
}

dcrt_status dcrt_num_warnings(const dcrt_plan* plan, size_t* count) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || count == nullptr) return null_argument("dcrt_num_warnings");
    *count = plan->runtime.warnings().size();
    return DCRT_OK;
  });
}

dcrt_status dcrt_warning(const dcrt_plan* plan, size_t index, const char** message) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || message == nullptr) return null_argument("dcrt_warning");
    const auto& warnings = plan->runtime.warnings();
    if (index >= warnings.size())
      return fail(DCRT_ERROR_INVALID_ARGUMENT,
                  dc::str_cat("warning index ", index, " is out of range: the plan has ",
                              warnings.size(), " warning(s)")
                      .c_str());
    *message = warnings[index].c_str();
    return DCRT_OK;
  });
}

dcrt_status dcrt_input_device_buffer(dcrt_plan* plan, size_t index, void** device_ptr) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || device_ptr == nullptr) return null_argument("dcrt_input_device_buffer");
    *device_ptr = nullptr;
    const dc::PlanTensor& in = plan->runtime.input_info(index);
    if (plan->emulated)
      return fail(DCRT_ERROR_UNSUPPORTED,
                  dc::str_cat("input '", in.name, "': the host emulator has no device memory to "
                              "bind; use dcrt_set_input").c_str());
    *device_ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(plan->runtime.input_device_buffer(index)));
    plan->input_set[index] = true;
    return DCRT_OK;
  });
}

dcrt_status dcrt_output_device_buffer(const dcrt_plan* plan, size_t index, const void** device_ptr) {
  return guarded(DCRT_ERROR_INVALID_ARGUMENT, [&] {
    if (plan == nullptr || device_ptr == nullptr) return null_argument("dcrt_output_device_buffer");
    *device_ptr = nullptr;
    const dc::PlanTensor& out = plan->runtime.output_info(index);
    if (!plan->ran)
      return fail(DCRT_ERROR_NOT_READY,
                  dc::str_cat("output '", out.name, "' has no value yet: call dcrt_run first").c_str());
    if (plan->emulated)
      return fail(DCRT_ERROR_UNSUPPORTED,
                  dc::str_cat("output '", out.name, "': the host emulator has no device memory; "
                              "use dcrt_get_output").c_str());
    *device_ptr = reinterpret_cast<const void*>(
        static_cast<uintptr_t>(plan->runtime.output_device_buffer(index)));
    return DCRT_OK;
  });
}

}  // extern "C"
