#include "fair_share.h"

#include <algorithm>
#include <limits>

#include "ir/error.h"

namespace dc {

void FairShare::add_tune(uint64_t tune, double weight) {
  DC_INTERNAL_CHECK(weight >= 1, "fair share: tune ", tune, " has weight ", weight, " (at least 1)");
  weights_[tune] = weight;
}

void FairShare::remove_tune(uint64_t tune) {
  weights_.erase(tune);
  for (auto& [type, t] : types_) t.lanes.erase(tune);
}

void FairShare::push(const std::string& gpu_type, uint64_t tune, uint64_t item) {
  DC_INTERNAL_CHECK(weights_.count(tune), "fair share: item for unknown tune ", tune);
  Type& t = types_[gpu_type];
  Lane& lane = t.lanes[tune];
  // Starts waiting: joins at the virtual time, never behind it.
  if (lane.items.empty()) lane.pass = std::max(lane.pass, t.virtual_time);
  lane.items.push_back(item);
}

std::optional<FairShare::Pick> FairShare::pick(const std::string& gpu_type,
                                               const std::function<bool(uint64_t)>& live) {
  auto tit = types_.find(gpu_type);
  if (tit == types_.end()) return std::nullopt;
  Type& t = tit->second;
  while (true) {
    Lane* best = nullptr;
    uint64_t best_tune = 0;
    for (auto& [tune, lane] : t.lanes) {
      // Dead items at the front cost nothing.
      while (!lane.items.empty() && !live(lane.items.front())) lane.items.pop_front();
      if (lane.items.empty()) continue;
      if (best == nullptr || lane.pass < best->pass) {
        best = &lane;
        best_tune = tune;
      }
    }
    if (best == nullptr) return std::nullopt;
    const uint64_t item = best->items.front();
    best->items.pop_front();
    if (!live(item)) continue;
    t.virtual_time = best->pass;
    best->pass += 1.0 / weights_.at(best_tune);
    return Pick{best_tune, item};
  }
}

size_t FairShare::queued(const std::string& gpu_type, uint64_t tune) const {
  const auto tit = types_.find(gpu_type);
  if (tit == types_.end()) return 0;
  const auto lit = tit->second.lanes.find(tune);
  return lit == tit->second.lanes.end() ? 0 : lit->second.items.size();
}

size_t FairShare::queued(const std::string& gpu_type) const {
  const auto tit = types_.find(gpu_type);
  if (tit == types_.end()) return 0;
  size_t n = 0;
  for (const auto& [tune, lane] : tit->second.lanes) n += lane.items.size();
  return n;
}

}  // namespace dc
