// How much the broker reads from its socket in one wake before its timers, the dispatch and
// the replies to clients get their turn: at most kMaxFrames messages, and no message more once
// kMaxBytes have been read. A tune's SubmitBatch is up to 1 MiB: 512 of them read in one wake
// held the replies (the tunes' heartbeats) for seconds, and the tunes reconnected (round 8 of
// docs/bench/farm-service.md). tests/unit/test_farm_broker.cpp holds both bounds.
#pragma once

#include <cstddef>

namespace dc {

class ReadBudget {
 public:
  static constexpr int kMaxFrames = 512;
  static constexpr size_t kMaxBytes = size_t{4} << 20;

  bool more() const { return frames_ < kMaxFrames && bytes_ < kMaxBytes; }
  void took(size_t bytes) {
    ++frames_;
    bytes_ += bytes;
  }

 private:
  int frames_ = 0;
  size_t bytes_ = 0;
};

}  // namespace dc
