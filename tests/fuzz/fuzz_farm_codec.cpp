// libFuzzer harness: any sequence of farm frames (farm_frames.h), each decoded as its reader
// decodes it. The broker's frames: parse_envelope, then the dispatcher's state machine
// (sessions, credits, leases, results) with two jobs queued for "h100" workers. The worker's
// frames: parse_envelope, the version check, and from_proto of a Job's two kernels. A
// ProtocolError (a UserError) is the expected answer to a bad frame; the broker drops it.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "farm_codec.h"
#include "job_wire.h"
#include "farm_dispatch.h"
#include "farm_frames.h"
#include "fuzz_util.h"

namespace {

void worker_reads(std::string_view bytes) {
  std::string why;
  const std::optional<dc::farm::Envelope> e =
      dc::farm::parse_envelope(bytes.data(), bytes.size(), dc::farm::kDefaultMaxMessageBytes, &why);
  if (!e || !dc::farm::version_ok(*e)) return;
  (void)dc::farm::body_name(*e);
  auto check = [](const dc::farm::Job& job) {
    dc::fuzz::expect_user_errors([&] {
      (void)dc::farm::from_proto(job.variant());
      (void)dc::farm::from_proto(job.reference());
    });
  };
  if (e->body_case() == dc::farm::Envelope::kJob) check(e->job());
  if (e->body_case() == dc::farm::Envelope::kJobs)
    for (const std::string& bytes : e->jobs().jobs()) {
      // As a worker reads a batch (version 4): each job on its own; one that does not parse
      // is answered from its address alone.
      if (dc::farm::Job job; job.ParseFromString(bytes)) check(job);
      else (void)dc::farm::read_job_address(bytes);
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dc::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using Clock = dc::FarmDispatcher::Clock;
  dc::DispatchOptions options;
  size_t sent = 0;
  dc::FarmDispatcher dispatcher(options, [&](const std::string&, const dc::farm::Envelope& e) {
    sent += dc::farm::serialize(e).size();
  });
  Clock::time_point now{};
  dispatcher.submit(dc::FarmDispatcher::prepare(dc::fuzz::small_job("a")), now);
  dispatcher.submit(dc::FarmDispatcher::prepare(dc::fuzz::small_job("b")), now);

  std::string_view in(reinterpret_cast<const char*>(data), size);
  dc::fuzz::Frame f;
  while (dc::fuzz::next_frame(&in, &f)) {
    if (f.to_worker()) {
      worker_reads(f.bytes);
      continue;
    }
    now += std::chrono::seconds(f.advance_s());
    dc::fuzz::expect_user_errors([&] {
      dispatcher.tick(now);
      std::string why;
      const std::optional<dc::farm::Envelope> e =
          dc::farm::parse_envelope(f.bytes.data(), f.bytes.size(), dc::farm::kDefaultMaxMessageBytes, &why);
      if (e) dispatcher.on_message("worker" + std::to_string(f.worker()), *e, now);
    });
  }
  (void)dispatcher.take_results();
  (void)dispatcher.status();
  return 0;
}
