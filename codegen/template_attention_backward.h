// attention_backward's two paths share the operands' loads, the mask and the stores:
// template_attention_backward.cpp (fp32 on CUDA cores) and template_attention_backward_mma.cpp
// (tf32, fp16, bf16 on tensor cores).
#pragma once

#include <string>

#include "ir/kernel.h"
#include "ir/workload.h"
#include "template_text.h"
#include "value_emitter.h"
#include "variant.h"

namespace dc {

// The holes both paths fill alike, after checking the workload is one dc.AttentionGrad on
// the template: SQ, SK, D, DV, SCALE, NEG_INF, the operands' pointers (Q, KT, V, O, DO, LSE),
// storage types (QT, KTT, VT, OT, DOT) and loads as float (LOAD_Q of dc_i0, dc_r, dc_d;
// LOAD_KT of dc_d, dc_j0, dc_c; LOAD_V of dc_j0, dc_c, dc_e; LOAD_O and LOAD_DO of dc_i0,
// dc_r, dc_e), the mask (MASK, MASKT, MASK_BASE of dc_b; MASK_TERM of dc_gi, dc_gj), PARAMS, and
// BATCH_OPERANDS: the statements that start both paths' kernels, the batch dc_b (block y) and
// its operands' pointers (dc_q, dc_kt, dc_v, dc_o, dc_do, dc_lse_in; dc_mask, dc_mbase).
TemplateVars attention_backward_vars(const Workload& w, ValueEmitter& ve);

// Gradient `out` (0 dQ, 1 dKt, 2 dV) stored at `index` as its dtype; "" when nothing reads it.
std::string attention_backward_store(const Workload& w, const ValueEmitter& ve, size_t out, const std::string& index,
                                     const std::string& value);

// The tensor-core path (Variant::precision tf32, fp16, bf16).
GeneratedKernel generate_attention_backward_mma(const Workload& w, const Variant& v);

}  // namespace dc
