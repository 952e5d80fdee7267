// Logging set-up: spdlog to stderr, so that stdout carries only a command's results.
#pragma once

#include <string>

namespace dc {

// level: "trace", "debug", "info", "warn", "error", "off". UserError for other names.
void init_logging(const std::string& level);

}  // namespace dc
