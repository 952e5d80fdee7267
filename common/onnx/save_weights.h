// Writing trained weights back into an ONNX model (dc-run --train --save-weights).
#pragma once

#include <map>
#include <string>

#include "ir/tensor.h"

namespace dc {

// Writes `out`: the model `source` with every initializer named in `values` replaced by its
// value (same name, dtype and shape: UserError otherwise) and external data inlined, so
// that onnx and onnxruntime load it as the source. Returns how many initializers it replaced.
int save_model_with_weights(const std::string& source, const std::string& out,
                            const std::map<std::string, Tensor>& values);

}  // namespace dc
