// The training step's attention, dc.Attention and dc.AttentionGrad (fuse_training_attention),
// as the fused attention templates see it: the light part that the parameter space needs too
// (dc_kernel_desc).
#pragma once

#include "ir/workload.h"

namespace dc {

// True for a workload of one dc.Attention(Q, Kt, V[, mask]) {scale} -> (O, LSE) whose operands
// are workload inputs stored as f32, f16 or bf16 (a mixed-precision step's), LSE f32 (the
// training step's forward, fuse_training_attention).
bool is_training_attention(const Workload& w);
// True for a workload of one dc.AttentionGrad(Q, Kt, V, O, dO, LSE[, mask]) whose operands
// are workload inputs stored as f32, f16 or bf16, LSE f32: what attention_backward reads.
bool is_attention_grad_on_template(const Workload& w);
// Such a workload as the cluster the fused templates match: MatMul(Q, Kt), Mul by the scale,
// Add of the mask, Softmax, the guard Where(IsNaN(P), 0, P) (a row masked entirely gives 0,
// as dc.Attention's reference), MatMul(P, V) -> O; LSE stays an output no node computes
// (AttentionMatch::lse). Any other workload is returned as it is.
Workload expand_training_attention(const Workload& w);

}  // namespace dc
