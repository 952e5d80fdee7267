#include "plan.h"

namespace dc {

const char* plan_tensor_kind_name(PlanTensorKind k) {
  switch (k) {
    case PlanTensorKind::input: return "input";
    case PlanTensorKind::output: return "output";
    case PlanTensorKind::weight: return "weight";
    case PlanTensorKind::intermediate: return "intermediate";
    case PlanTensorKind::scratch: return "scratch";
    case PlanTensorKind::view: return "view";
  }
  return "?";
}

int64_t PlanTensor::bytes() const {
  return shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace dc
