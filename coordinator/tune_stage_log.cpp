// StageLog: the one helper that times and logs tune's stages (tune_stages.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tune_stages.h"
#include "ir/clock.h"

namespace dc::tune_stage {

void StageLog::record(const std::string& name, double seconds, const std::string& detail) {
  stages_.push_back({name, seconds, detail});
  spdlog::info("tune: {} ({:.3f} s): {}", name, seconds, detail);
  if (opts_.console)
    *opts_.console << fmt::format("tune: {:<10} {:7.3f} s  {}\n", name, seconds, detail) << std::flush;
}

void StageLog::notice(const std::string& text) const {
  spdlog::info("tune: {}", text);
  if (opts_.console) *opts_.console << "tune: " << text << "\n" << std::flush;
}

}  // namespace dc::tune_stage
