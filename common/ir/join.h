// Items joined by a separator ("a, b, c"): the one helper, over fmt::join.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dc {

inline std::string join(const std::vector<std::string>& items, std::string_view sep) {
  return fmt::format("{}", fmt::join(items, sep));
}

}  // namespace dc
