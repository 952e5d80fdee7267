// What both attention templates (template_attention.cpp on CUDA cores, template_attention_mma.cpp
// on tensor cores) share: matching an "attention_fused" workload, strided views of Q, Kt and
// V in memory, and the ValueEmitter code of the fused scale/mask (softmax input from the
// bound raw score) and of the epilogue (every workload output from the attention value).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/workload.h"
#include "ir/kernel.h"
#include "training_attention.h"
#include "variant.h"
#include "value_emitter.h"

namespace dc {

// MatMul(Q, Kt) -> injective ops -> Softmax(last axis) -> [Cast, IsNaN/Where guard] ->
// MatMul(P, V) (+ epilogue). Q, Kt and V may be computed by injective ops inside the cluster
// (scale, RoPE, the GQA repeat, views): the kernel reads them through the ValueEmitter.
struct AttentionMatch {
  const Node* qk = nullptr;
  const Node* softmax = nullptr;
  const Node* pv = nullptr;
  std::string q, kt, v;  // the tensors the MatMuls read
  int64_t sq = 0, sk = 0, d = 0, dv = 0, batch = 1;
  Shape batch_shape;            // the scores' leading dims (batch * heads)
  std::vector<std::string> bc;  // C names of the batch coordinates: dc_bc0, dc_bc1, ...
  DType score_dtype = DType::f32;  // of Q K^T and of P V (the attention output)
  DType out_dtype = DType::f32;
  bool guarded = false;  // Where(IsNaN(P), 0, P) between the Softmax and P V: masked rows give 0
  // The training step's dc.Attention (expand_training_attention): the workload output no node
  // computes, each query row's log-sum-exp [batch.., Sq], which the kernel writes. "" if none.
  std::string lse;

  // The batch coordinates followed by `tail`.
  std::vector<std::string> with_batch(std::vector<std::string> tail) const;
};

// MatMul `mm` reads the Softmax's output as its A operand, directly or through Casts and the
// guard Where(IsNaN(P), 0, P) for rows masked entirely (*guarded is then set).
bool reads_probabilities(const Graph& g, const Node& mm, const Node& softmax, bool* guarded);

// InternalError (naming attention_fused) unless the workload has that shape.
AttentionMatch match_attention(const Workload& w);


// The perm of the Transpose producing workload output `tensor` from the attention output
// (the kernel stores it at the permuted coordinates: no copy kernel after attention), or
// nullopt when `tensor` is not such a Transpose.
std::optional<std::vector<int64_t>> output_permutation(const Graph& g, const AttentionMatch& m,
                                                       const std::string& tensor);

// An operand read straight from memory: a graph input, or a Transpose of one inside the
// cluster (an index map, no copy). Otherwise `direct` is false and the operand is computed
// through ValueEmitter element by element.
struct AttentionView {
  bool direct = false;
  std::string pointer;           // kernel parameter (in<i>)
  std::vector<int64_t> strides;  // per dim of the operand tensor, 0 for dims of extent 1
  DType dtype = DType::f32;      // storage type of the memory read
};
AttentionView attention_view(const Graph& g, const ValueEmitter& ve, const std::string& tensor);

// Statements declaring the batch coordinates dc_bc* from the linear batch index `lin`.
std::string attention_batch_setup(const AttentionMatch& m, const std::string& lin);
// "const dc_i64 dc_<name>_base = ...;": the view's offset of the current batch coordinates.
std::string attention_view_base(const AttentionMatch& m, const AttentionView& v,
                                const std::string& name);

// Appends to `code` the statements of the Softmax input at (dc_qr, dc_kc) whose raw score
// Q K^T is in C variable `raw` (scale, mask with broadcasting: the cluster's injective ops
// between the MatMul and the Softmax) and returns its expression.
std::string attention_score(ValueEmitter& ve, const AttentionMatch& m, const std::string& raw,
                            std::string& code);

// Statements storing every workload output at (dc_qr, dc_e) given the attention output's
// value in C variable `h` (fused epilogue through ValueEmitter; f16/bf16 outputs rounded
// with dc_from_f32).
std::string attention_epilogue(ValueEmitter& ve, const Workload& w, const AttentionMatch& m,
                               const std::string& h);

// The tensor-core template (template_attention_mma.cpp): variants of precision tf32, fp16
// or bf16. generate_attention hands them over.
GeneratedKernel generate_attention_mma(const Workload& w, const Variant& v);

}  // namespace dc
