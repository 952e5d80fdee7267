#include <algorithm>

#include "ref/kernel.h"
#include "ref/training_ops.h"

namespace dc::ref {

std::span<const OpDef> all_ops() {
  static const std::vector<OpDef> table = [] {
    std::vector<OpDef> t;
    for (auto fam : {elementwise_ops(), shape_ops(), linalg_ops(), pool_ops(), norm_ops(),
                     norm_group_ops(), index_ops(), resample_ops(), conv_transpose_ops(),
                     scatter_ops(), search_ops(), einsum_ops(), training_ops(), conv_grad_ops(),
                     grad_ops(), attention_ops()})
      t.insert(t.end(), fam.begin(), fam.end());
    return t;
  }();
  return table;
}

const OpDef* find_op(std::string_view op) {
  const auto ops = all_ops();
  auto it = std::find_if(ops.begin(), ops.end(), [&](const OpDef& d) { return d.op == op; });
  return it == ops.end() ? nullptr : &*it;
}

}  // namespace dc::ref
