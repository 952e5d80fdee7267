#include "kernel_check.h"

#include <algorithm>

#include <fmt/format.h>

#include "ref/compare.h"
#include "ir/error.h"

namespace dc {

std::string bind_inputs(const Workload& w, const GeneratedKernel& k, const std::vector<Tensor>& inputs,
                        std::vector<Tensor>* buffers) {
  buffers->assign(k.buffers.size(), Tensor());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::input) continue;
    const auto it = std::find(w.graph.inputs.begin(), w.graph.inputs.end(), b.name);
    const size_t at = static_cast<size_t>(it - w.graph.inputs.begin());
    if (it == w.graph.inputs.end() || at >= inputs.size())
      return str_cat("kernel ", k.template_name, " reads '", b.name, "', which is no input of the workload");
    const Tensor& t = inputs[at];
    if (t.dtype() != b.dtype || t.shape() != b.shape)
      return str_cat("kernel ", k.template_name, " reads '", b.name, "' as ", dtype_name(b.dtype), " ",
                     shape_str(b.shape), " but the workload input is ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
    (*buffers)[i] = t;
  }
  return "";
}

namespace {

const Tensor* output_named(const GeneratedKernel& k, const std::vector<Tensor>& buffers, const std::string& name) {
  for (size_t i = 0; i < k.buffers.size(); ++i)
    if (k.buffers[i].role == BufferRole::output && k.buffers[i].name == name) return &buffers[i];
  return nullptr;
}

ReferenceCheck failed(JobStatus status, std::string error, bool context_lost = false) {
  ReferenceCheck c;
  c.status = status;
  c.error = std::move(error);
  c.context_lost = context_lost;
  return c;
}

}  // namespace

ReferenceCheck check_against_reference(const KernelRun& run, const Workload& w, const GeneratedKernel& variant,
                                       const std::vector<char>& variant_binary, const GeneratedKernel& reference,
                                       const std::vector<char>& reference_binary, const Tolerance& tolerance,
                                       const std::vector<Tensor>& inputs, const std::string& device) {
  std::vector<Tensor> want, got;
  if (std::string e = bind_inputs(w, reference, inputs, &want); !e.empty())
    return failed(JobStatus::unsupported, "reference kernel: " + e);
  if (std::string e = bind_inputs(w, variant, inputs, &got); !e.empty()) return failed(JobStatus::unsupported, e);
  const GpuRunResult ref_run = run(reference, reference_binary, want);
  if (!ref_run.ok()) return failed(ref_run.status, "reference kernel: " + ref_run.error, ref_run.context_lost);
  const GpuRunResult var_run = run(variant, variant_binary, got);
  if (!var_run.ok()) return failed(var_run.status, var_run.error, var_run.context_lost);

  ReferenceCheck check;
  for (const std::string& name : w.graph.outputs) {
    const Tensor* out = output_named(variant, got, name);
    const Tensor* ref = output_named(reference, want, name);
    if (out == nullptr || ref == nullptr)
      return failed(JobStatus::unsupported,
                    str_cat("output ", name, " is missing from ", out ? "the reference kernel" : "the variant"));
    const ref::Comparison c = ref::compare_tensors(*out, *ref, tolerance.rtol, tolerance.atol);
    check.max_rel_error = std::max(check.max_rel_error, c.rel_l2_error);
    check.max_abs_error = std::max(check.max_abs_error, c.max_abs_error);
    if (!c.pass && check.status == JobStatus::ok) {
      check.status = JobStatus::wrong_result;
      check.error = c.problem.empty() ? fmt::format("output {}: relative L2 error {:.3g} above {:.3g} (max abs. "
                                                    "error {:.3g}){}",
                                                    name, c.rel_l2_error, tolerance.rtol, c.max_abs_error, device)
                                      : fmt::format("output {}: {}", name, c.problem);
    }
  }
  return check;
}

}  // namespace dc
