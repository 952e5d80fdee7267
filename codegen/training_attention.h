// The training step's forward attention, dc.Attention (fuse_training_attention), as the fused
// attention templates see it: the light part that the parameter space needs too (dc_kernel_desc).
#pragma once

#include "ir/workload.h"

namespace dc {

// True for a workload of one f32 dc.Attention(Q, Kt, V[, mask]) {scale} -> (O, LSE) whose
// operands are workload inputs (the training step's forward, fuse_training_attention).
bool is_training_attention(const Workload& w);
// Such a workload as the cluster the fused templates match: MatMul(Q, Kt), Mul by the scale,
// Add of the mask, Softmax, the guard Where(IsNaN(P), 0, P) (a row masked entirely gives 0,
// as dc.Attention's reference), MatMul(P, V) -> O; LSE stays an output no node computes
// (AttentionMatch::lse). Any other workload is returned as it is.
Workload expand_training_attention(const Workload& w);

}  // namespace dc
