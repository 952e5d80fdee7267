// Weighted fair share between the tunes of the farm service, per GPU type: stride
// scheduling (Waldspurger and Weihl, 1995). Each tune has a weight (its --priority) and a
// pass per GPU type; pick() serves the backlogged tune with the least pass and advances it
// by 1 / weight, so that while tunes wait, the jobs each is served follow their weights, and
// every waiting tune is served within (sum of weights / its weight) picks: none starves.
// A tune that starts waiting joins at the current virtual time (the least pass among those
// waiting), so that time it spent idle or unborn is no credit to spend in a burst.
//
// Items are opaque ids; `live` tells pick() which are still wanted (an item another tune's
// pick already served, or one cancelled, is skipped without charge). Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace dc {

class FairShare {
 public:
  struct Pick {
    uint64_t tune = 0;
    uint64_t item = 0;
  };

  // Weight >= 1. Re-adding changes the weight.
  void add_tune(uint64_t tune, double weight);
  // Forgets the tune and its queued items (a departed client).
  void remove_tune(uint64_t tune);
  // Queues an item for a tune on a GPU type (FIFO per tune and type).
  void push(const std::string& gpu_type, uint64_t tune, uint64_t item);
  // The next item for a GPU type, or nullopt when no tune has a live one.
  std::optional<Pick> pick(const std::string& gpu_type, const std::function<bool(uint64_t)>& live);
  // Items queued (live or not yet skipped) for a tune on a type, and on a type overall.
  size_t queued(const std::string& gpu_type, uint64_t tune) const;
  size_t queued(const std::string& gpu_type) const;

 private:
  struct Lane {
    std::deque<uint64_t> items;
    double pass = 0;
  };
  struct Type {
    std::map<uint64_t, Lane> lanes;  // by tune
    double virtual_time = 0;         // pass of the last pick
  };
  std::map<uint64_t, double> weights_;
  std::map<std::string, Type> types_;
};

}  // namespace dc
