// A whole-model execution plan: the artifact `tune --out DIR` writes per GPU type and that
// libdcrt / dc-run execute (docs/plan-format.md). In memory it is this struct; on disk it
// is DIR/<gpu>/plan.json (everything but kernel text and weight bytes), kernels.cu (the
// kernel modules, readable, the prelude written once) and weights.bin (weight bytes).
//
// Model:
//  - tensors: every buffer a run touches. Inputs and outputs are the model's (bound by the
//    user); weights live in weights.bin (after simplification: BN folded, constants folded);
//    intermediates and scratch live in one device arena at offsets from a liveness-based
//    memory plan, so two tensors share bytes only when never live at the same time.
//  - modules: the distinct generated kernels (GeneratedKernel: source, buffer descriptions,
//    launches). Instances of one workload with one variant share a module.
//  - steps: the launch sequence, one per chosen cluster in topological order; step i runs
//    module modules[steps[i].module] with its buffer j bound to tensors[steps[i].buffers[j]].
//  - views: chosen clusters that only re-describe bytes (Reshape, Flatten, Squeeze, Unsqueeze,
//    Identity; a Slice/Split along the outermost non-unit axis). They launch nothing: their
//    outputs are `view` tensors, bytes of another tensor (docs/plan-format.md, "Views").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/dtype.h"
#include "ir/precision.h"
#include "ir/shape.h"
#include "ir/tensor.h"
#include "ir/kernel.h"
#include "variant.h"

namespace dc {

inline constexpr const char* kPlanFormat = "dc-plan/1";
inline constexpr int64_t kPlanAlignment = 256;  // arena offsets and weights.bin offsets

// view: bytes [offset, offset + bytes) of tensors[view_of], which is not itself a view.
enum class PlanTensorKind { input, output, weight, intermediate, scratch, view };
const char* plan_tensor_kind_name(PlanTensorKind k);

struct PlanTensor {
  std::string name;  // the model's tensor name; scratch: "<step>.scratch<j>"
  PlanTensorKind kind = PlanTensorKind::intermediate;
  DType dtype = DType::f32;
  Shape shape;
  // intermediate/scratch: byte offset in the arena; weight: byte offset in weights.bin;
  // input/output: -1 (own buffers, bound by the user); view: byte offset in tensors[view_of].
  int64_t offset = -1;
  int view_of = -1;  // view: the tensor whose bytes it is; -1 otherwise
  // intermediate/scratch: the first step that writes it and the last step that reads it
  // (scratch: both its own step). -1 otherwise.
  int first_step = -1;
  int last_step = -1;
  int64_t bytes() const;  // numel * dtype size
};

struct PlanStep {
  int module = 0;                 // index into ExecPlan::modules
  std::vector<int> buffers;       // tensor ids, parallel to modules[module].buffers
  std::string cluster;            // "conv+add+relu#57": pattern and candidate index
  std::vector<std::string> nodes; // the model's node names the step computes
  std::string workload;           // workload signature (16 hex digits)
  std::string variant_key;        // "reference" for the reference kernel
  bool reference = false;         // no successful measurement: the naive reference kernel
  double measured_us = 0;         // 0 for the reference kernel
  double estimated_us = 0;
};

// A chosen cluster that became views instead of a step (its nodes' outputs are views).
struct PlanView {
  std::string cluster;             // as PlanStep::cluster
  std::vector<std::string> nodes;  // the model's node names
};

// A training plan (`plan|tune --train --out`, docs/training.md): one run is one training
// step. The step graph's state (weights, optimizer state, BatchNorm running statistics, the
// step counter) are weight tensors; after each step the runtime copies each state's `next`
// output into it, so the next step reads the updated values.
struct PlanStateUpdate {
  int state = -1;  // a weight tensor
  int next = -1;   // the output holding its value after the step
};

// A mixed-precision training step (--precision fp16|bf16 with --train; docs/training.md
// "Mixed precision"). For f16, GradScaler's dynamic loss scaling: its two state tensors
// (names; each is also in PlanTraining::state) and its constants.
struct PlanMixedPrecision {
  std::string dtype;              // "f16" or "bf16": activations and GEMM operands
  std::string loss_scale;         // f16: "train.loss_scale"; "" for bf16 (no scaling)
  std::string growth_tracker;     // f16: "train.loss_scale_growth", finite steps in a row
  double init_scale = 0;          // 65536
  double growth_factor = 2, backoff_factor = 0.5;
  int64_t growth_interval = 0;    // 2000
};

struct PlanTraining {
  std::string loss;       // cross_entropy, mse, none
  std::string labels;     // the labels (target) input's name; "" for --loss none
  std::string optimizer;  // sgd, adamw
  std::vector<std::pair<std::string, double>> hyperparameters;  // lr, momentum, ...
  std::string source_model;  // the ONNX file trained, as given (dc-run --save-weights)
  // outputs[0, model_outputs): the loss, then the model's outputs; the rest are `next`s.
  int model_outputs = 0;
  std::vector<PlanStateUpdate> state;
  std::optional<PlanMixedPrecision> mixed_precision;  // absent: an fp32/tf32 step
};

struct ExecPlan {
  std::string format = kPlanFormat;
  std::string model_name;
  std::string model_sha256;
  std::string gpu_type;           // "a100"
  std::string gpu_name;           // "NVIDIA A100-SXM4-40GB"
  std::string gpu_arch;           // "sm_80": what it was tuned (and NVRTC-checked) for
  std::string nvrtc_version;      // toolchain of the tune, "13.0"
  bool emulated = false;          // times are modelled (emulated workers), not measured
  // The plan's precision (--precision): fp16/bf16 plans store tensors in that type (each
  // tensor's dtype says which), tf32/fp16/bf16 GEMMs may run on tensor cores. Plans
  // written before it existed read as fp32.
  Precision precision = Precision::fp32;
  double measured_total_us = 0;   // sum over steps (reference kernels count 0)
  double estimated_total_us = 0;
  int reference_steps = 0;        // steps run by the reference kernel
  // Graph rewrites baked into weights.bin and the kernels, one line each
  // ("BatchNormalization x53 folded into Conv weights").
  std::vector<std::string> weight_transforms;

  std::vector<PlanTensor> tensors;
  std::vector<int> inputs;        // tensor ids, in the model's input order
  std::vector<int> outputs;       // tensor ids, in the model's output order
  std::vector<GeneratedKernel> modules;
  std::vector<PlanStep> steps;
  std::vector<PlanView> views;
  int64_t arena_bytes = 0;        // device arena for intermediates and scratch
  int64_t unshared_bytes = 0;     // what one buffer per tensor would take (for comparison)
  std::optional<PlanTraining> training;  // plan.json "mode": "train"; nullopt: inference
  // Weight values, parallel to `tensors` (defined for weights only). read_plan fills them
  // from weights.bin; write_plan writes them there.
  std::vector<Tensor> values;
};

}  // namespace dc
