#include "ref/einsum.h"

#include <algorithm>
#include <cctype>

#include "ir/error.h"

namespace dc::ref {

EinsumEquation parse_einsum(const Node& n, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char c : n.attrs.get_string("equation", ""))
    if (c != ' ') eq += c;
  const std::string orig = n.attrs.get_string("equation", "");
  DC_USER_CHECK(eq.find('.') == std::string::npos, "Einsum: equation '", orig,
                "' uses an ellipsis, which dc does not support");
  EinsumEquation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  for (size_t b = 0;;) {
    const size_t c = lhs.find(',', b);
    e.inputs.push_back(lhs.substr(b, c == std::string::npos ? std::string::npos : c - b));
    if (c == std::string::npos) break;
    b = c + 1;
  }
  DC_USER_CHECK(e.inputs.size() == shapes.size(), "Einsum: equation '", orig, "' has ",
                e.inputs.size(), " terms for ", shapes.size(), " inputs");
  std::map<char, int> count;
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    const std::string& t = e.inputs[i];
    DC_USER_CHECK(t.size() == shapes[i].size(), "Einsum: term '", t, "' of equation '", orig,
                  "' has ", t.size(), " letters for input ", i, " of rank ", shapes[i].size());
    for (size_t k = 0; k < t.size(); ++k) {
      DC_USER_CHECK(std::isalpha(static_cast<unsigned char>(t[k])), "Einsum: equation '", orig,
                    "' has the character '", t[k], "'");
      auto [it, fresh] = e.extent.emplace(t[k], shapes[i][k]);
      DC_USER_CHECK(fresh || it->second == shapes[i][k], "Einsum: letter '", t[k], "' of equation '",
                    orig, "' has extents ", it->second, " and ", shapes[i][k]);
      ++count[t[k]];
    }
  }
  if (arrow != std::string::npos) {
    e.output = eq.substr(arrow + 2);
    for (char c : e.output)
      DC_USER_CHECK(e.extent.count(c) && std::count(e.output.begin(), e.output.end(), c) == 1,
                    "Einsum: output letter '", c, "' of equation '", orig,
                    "' is not an input letter or is repeated");
  } else {
    for (const auto& [c, k] : count)  // std::map: sorted
      if (k == 1) e.output += c;
  }
  return e;
}

}  // namespace dc::ref
