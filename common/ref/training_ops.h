// The op families of dc-internal training ops (docs/training.md), named dc.*, that
// op_table.cpp adds to the reference executor's table beside the ONNX families of kernel.h.
#pragma once

#include <span>

#include "ref/kernel.h"

namespace dc::ref {

std::span<const OpDef> training_ops();   // ops_training.cpp: dc.Dropout, dc.BatchNormTrain, dc.BatchNormStats, loss, optimizers
std::span<const OpDef> conv_grad_ops();  // ops_grad_conv.cpp: dc.ConvGradData/Weight, dc.MaxPool/AveragePoolGrad
std::span<const OpDef> attention_ops();  // ops_attention.cpp: dc.Attention, dc.AttentionGrad
std::span<const OpDef> grad_ops();       // ops_grad.cpp: dc.GeluGrad, dc.GatherGrad

}  // namespace dc::ref
