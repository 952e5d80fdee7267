/* libdcrt: running a dc execution plan (the directory `dc-coordinator tune --out DIR` writes
 * per GPU type: plan.json, kernels.cu, weights.bin) from C or any language with a C FFI.
 *
 *   dcrt_plan* plan = NULL;
 *   if (dcrt_load("tuned/h100", NULL, &plan) != DCRT_OK) {
 *     fprintf(stderr, "%s\n", dcrt_last_error());
 *     return 1;
 *   }
 *   dcrt_set_input(plan, 0, image, image_bytes);
 *   dcrt_run(plan);
 *   dcrt_get_output(plan, 0, logits, logits_bytes);
 *   dcrt_free(plan);
 *
 * Loading compiles the plan's kernels for the device with NVRTC (cached on disk), uploads
 * the weights once and records the launch sequence as a CUDA graph; dcrt_run replays it and
 * returns when the outputs are ready. With options.emulate the plan runs on the host emulator
 * instead (CPU, correctness only, slow), on machines without a GPU.
 *
 * Errors: every function returns a dcrt_status; on failure dcrt_last_error() gives the
 * message (one line, naming the input, file or step at fault). No function lets a C++
 * exception escape. A plan tuned for another GPU type still runs where the device can run
 * its kernels, with a warning (dcrt_warning).
 *
 * Threads: a dcrt_plan is used by one thread at a time; distinct plans are independent.
 * C99; dcrt.hpp is a C++ wrapper (RAII, exceptions). */
#ifndef DCRT_H
#define DCRT_H

#include <stddef.h>
#include <stdint.h>

/* libdcrt.so is built with hidden visibility: only what DCRT_API marks is exported. */
#if defined(__GNUC__)
#define DCRT_API __attribute__((visibility("default")))
#else
#define DCRT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded plan, bound to one device. */
typedef struct dcrt_plan dcrt_plan;

typedef enum dcrt_status {
  DCRT_OK = 0,
  DCRT_ERROR_INVALID_ARGUMENT = 1, /* NULL pointer, index out of range, wrong byte count */
  DCRT_ERROR_LOAD = 2,             /* plan missing, corrupt or truncated; no usable device;
                                      a kernel that does not compile for the device */
  DCRT_ERROR_NOT_READY = 3,        /* run before every input is set; output before a run */
  DCRT_ERROR_RUN = 4,              /* a kernel failed while running */
  DCRT_ERROR_UNSUPPORTED = 5,      /* e.g. timing on the host emulator */
  DCRT_ERROR_OUT_OF_MEMORY = 6,
  DCRT_ERROR_INTERNAL = 7          /* a bug in dc: please report the message */
} dcrt_status;

typedef struct dcrt_options {
  int emulate;           /* nonzero: the host emulator instead of a GPU */
  int device;            /* CUDA device ordinal */
  const char* cache_dir; /* kernel compile cache; NULL or "" = the default under ~/.cache/dc */
} dcrt_options;

#define DCRT_MAX_RANK 8

typedef struct dcrt_tensor_info {
  const char* name;  /* the model's tensor name; valid until dcrt_free */
  const char* dtype; /* "f32", "f16", "i64", "bool", ...; static */
  int rank;
  int64_t dims[DCRT_MAX_RANK]; /* dims[0..rank) */
  size_t bytes;                /* what dcrt_set_input / dcrt_get_output exchange */
} dcrt_tensor_info;

/* {emulate 0, device 0, cache_dir NULL}. */
DCRT_API dcrt_options dcrt_default_options(void);

/* "DCRT_ERROR_LOAD", ... */
DCRT_API const char* dcrt_status_name(dcrt_status status);

/* Message of the last failed call on this thread ("" if none failed yet). Valid until the
 * next failing call on this thread. */
DCRT_API const char* dcrt_last_error(void);

/* Loads the plan directory `dir` on the device options ask for (NULL: defaults). On success
 * *plan is a new plan to free with dcrt_free; on failure *plan is NULL. */
DCRT_API dcrt_status dcrt_load(const char* dir, const dcrt_options* options, dcrt_plan** plan);

/* Releases everything the plan holds (device memory, modules). NULL is a no-op. */
DCRT_API void dcrt_free(dcrt_plan* plan);

DCRT_API dcrt_status dcrt_num_inputs(const dcrt_plan* plan, size_t* count);
DCRT_API dcrt_status dcrt_num_outputs(const dcrt_plan* plan, size_t* count);
DCRT_API dcrt_status dcrt_input_info(const dcrt_plan* plan, size_t index, dcrt_tensor_info* info);
DCRT_API dcrt_status dcrt_output_info(const dcrt_plan* plan, size_t index, dcrt_tensor_info* info);

/* Copies `bytes` bytes (exactly the input's, see dcrt_input_info) into input `index`. The
 * value stays bound for every later run until set again. */
DCRT_API dcrt_status dcrt_set_input(dcrt_plan* plan, size_t index, const void* data, size_t bytes);

/* One inference on the bound inputs; returns when the outputs are ready. */
DCRT_API dcrt_status dcrt_run(dcrt_plan* plan);

/* Copies output `index` of the last run into `data` (`bytes`: exactly the output's). */
DCRT_API dcrt_status dcrt_get_output(const dcrt_plan* plan, size_t index, void* data, size_t bytes);

/* Times `runs` runs after `warmup` untimed ones: samples_us[0..runs) receives each run's
 * latency in microseconds. DCRT_ERROR_UNSUPPORTED on the host emulator. */
DCRT_API dcrt_status dcrt_time_runs(dcrt_plan* plan, int warmup, int runs, double* samples_us);

/* What the plan runs on: "NVIDIA H100 80GB HBM3 (cuda:0, sm_90)" or "host emulator ...".
 * Valid until dcrt_free. */
DCRT_API dcrt_status dcrt_device_description(const dcrt_plan* plan, const char** description);

/* Notices from loading, e.g. a plan tuned for another GPU type. Valid until dcrt_free. */
DCRT_API dcrt_status dcrt_num_warnings(const dcrt_plan* plan, size_t* count);
DCRT_API dcrt_status dcrt_warning(const dcrt_plan* plan, size_t index, const char** message);

/* Training plans (`dc-coordinator plan|tune --train --out`, docs/training.md). Their outputs
 * are the loss, the model's outputs, then the state after the step that is not updated in
 * place (docs/training.md "State between steps"). dcrt_train_step runs one step on the bound
 * inputs (the model's inputs, then the labels) and carries the state (weights, optimizer
 * state, BatchNorm statistics, step counter) into the next step;
 * DCRT_ERROR_UNSUPPORTED for an inference plan. The state tensors can be read and written
 * between steps (a checkpoint); their order is plan.json's training.state. dcrt_run (or
 * dcrt_time_runs) on a training plan runs the step's kernels without carrying the state: the
 * weights and optimizer state it updates in place change, the copied rest does not. */
DCRT_API dcrt_status dcrt_is_training(const dcrt_plan* plan, int* training);
DCRT_API dcrt_status dcrt_train_step(dcrt_plan* plan);
DCRT_API dcrt_status dcrt_num_states(const dcrt_plan* plan, size_t* count);
DCRT_API dcrt_status dcrt_state_info(const dcrt_plan* plan, size_t index, dcrt_tensor_info* info);
DCRT_API dcrt_status dcrt_get_state(const dcrt_plan* plan, size_t index, void* data, size_t bytes);
DCRT_API dcrt_status dcrt_set_state(dcrt_plan* plan, size_t index, const void* data, size_t bytes);

/* Zero-copy binding on a GPU (DLPack, the Python package): the device address (a
 * CUdeviceptr in the device's primary context) of input `index`'s buffer, exactly its bytes
 * long. The caller writes the input there itself, e.g. a device-to-device copy, finished
 * before dcrt_run; the input then counts as set. DCRT_ERROR_UNSUPPORTED on the host
 * emulator. The address stays valid until dcrt_free. */
DCRT_API dcrt_status dcrt_input_device_buffer(dcrt_plan* plan, size_t index, void** device_ptr);

/* The device address of output `index` after a run; its value stays until the next run.
 * DCRT_ERROR_NOT_READY before a run, DCRT_ERROR_UNSUPPORTED on the host emulator. */
DCRT_API dcrt_status dcrt_output_device_buffer(const dcrt_plan* plan, size_t index,
                                               const void** device_ptr);

#ifdef __cplusplus
}
#endif

#endif /* DCRT_H */
