#include "ir/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "ir/error.h"

namespace dc {

void init_logging(const std::string& level) {
  const auto lvl = spdlog::level::from_str(level);
  DC_USER_CHECK(lvl != spdlog::level::off || level == "off", "unknown log level '", level,
                "' (use trace, debug, info, warn, error or off)");
  auto logger = spdlog::stderr_color_mt("dc");
  logger->set_pattern("[%T.%e] [%^%l%$] %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace dc
