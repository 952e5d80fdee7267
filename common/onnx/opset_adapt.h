// Opsets outside what Debian's ONNX library (1.12: opsets up to 17) checks and infers.
//
// - Opsets 1..5 go through ONNX's own version converter: to opset 6, shape inference, then
//   to opset 11 (the converter's broadcast adapters need the shapes the first step gives).
//   What the converter cannot carry is refused with its message.
// - Opsets 18..23 are rewritten into their opset-17 form: the ops whose meaning changed
//   (Reduce axes as inputs, Split num_outputs, Pad axes, Resize antialias/axes, ...) are
//   expressed the opset-17 way, or refused when they use something 17 cannot express; ops
//   ONNX 1.12 does not know (Gelu, Mish, GroupNormalization) move to a private domain for
//   the checker and shape inference, and dc's own shape functions cover them. Opset 23's
//   Attention, RMSNormalization and RotaryEmbedding become their node chains (opset23_ops.h).
// docs/onnx-conformance.md ("Opsets") says why this and not a newer ONNX.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onnx {
class ModelProto;
}

namespace dc {

// The newest default-domain opset Debian's ONNX library knows.
inline constexpr int64_t kOnnxLibMaxOpset = 17;
// Domain of nodes whose op ONNX 1.12 does not know; import reads them as default-domain ops.
inline constexpr const char* kNewerOpsDomain = "ai.dc.newer_opset";

struct OpsetAdaptation {
  int64_t source_opset = 0;  // what the model declares
  int64_t opset = 0;         // what it declares after adaptation
  std::string how;           // "" when nothing changed, else one line for a note
};

// Rewrites `m` in place (default-domain opset < 6 or > 17; IR version > 8 read as 8);
// UserError naming the node for what cannot be carried.
OpsetAdaptation adapt_opset(onnx::ModelProto& m);

}  // namespace dc
