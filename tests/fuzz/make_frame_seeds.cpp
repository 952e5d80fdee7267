// Writes seed inputs of fuzz_farm_codec (farm_frames.h) into DIR: a recorded conversation
// between one emulated "h100" worker and the dispatcher (Hello, Welcome, Ready, two Jobs,
// their Results, Heartbeat, Bye), each frame on its own, and a foreign-version Hello.
//   make_frame_seeds DIR
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "farm_codec.h"
#include "farm_dispatch.h"
#include "farm_frames.h"
#include "fuzz_util.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_frame_seeds DIR\n");
    return 2;
  }
  namespace farm = dc::farm;
  dc::fuzz::quiet_logs();
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  std::vector<std::string> frames;  // packed, in the order of the conversation
  std::vector<farm::Job> jobs;
  dc::FarmDispatcher dispatcher({}, [&](const std::string&, const farm::Envelope& e) {
    frames.push_back(dc::fuzz::pack_frame(0x80, farm::serialize(e)));
    if (e.body_case() == farm::Envelope::kJob) jobs.push_back(e.job());
    if (e.body_case() == farm::Envelope::kJobs)
      for (const std::string& bytes : e.jobs().jobs())
        if (farm::Job j; j.ParseFromString(bytes)) jobs.push_back(std::move(j));
  });
  dc::FarmDispatcher::Clock::time_point now{};
  dispatcher.submit(dc::FarmDispatcher::prepare(dc::fuzz::small_job("a")), now);
  dispatcher.submit(dc::FarmDispatcher::prepare(dc::fuzz::small_job("b")), now);
  auto from_worker = [&](const farm::Envelope& e) {
    frames.push_back(dc::fuzz::pack_frame(0x00, farm::serialize(e)));
    dispatcher.on_message("worker0", e, now);
    dispatcher.dispatch(now);
  };

  farm::Envelope hello = farm::make_envelope();
  hello.mutable_hello()->set_worker_id("host/1");
  hello.mutable_hello()->set_host("host");
  farm::GpuInventory* g = hello.mutable_hello()->add_gpus();
  g->set_device_index(0);
  g->set_gpu_type("h100");
  g->set_device_name("emulated h100");
  g->set_emulated(true);
  g->set_arch("sm_90");
  from_worker(hello);
  farm::Envelope ready = farm::make_envelope();
  ready.mutable_ready()->set_device_index(0);
  ready.mutable_ready()->set_credits(2);
  from_worker(ready);
  for (const farm::Job& j : std::vector<farm::Job>(jobs)) {
    farm::Envelope r = farm::make_envelope();
    farm::Result* res = r.mutable_result();
    res->set_lease_id(j.lease_id());
    res->set_job_id(j.job_id());
    res->set_status("ok");
    res->add_samples_us(3.5);
    res->add_samples_us(3.7);
    res->set_max_rel_error(1e-7);
    res->set_registers(32);
    res->set_emulated(true);
    res->set_device_index(0);
    res->set_nvrtc_version("13.0");
    from_worker(r);
  }
  farm::Envelope beat = farm::make_envelope();
  beat.mutable_heartbeat()->set_sent_unix_ms(1);
  from_worker(beat);
  farm::Envelope bye = farm::make_envelope();
  bye.mutable_bye()->set_reason("done");
  from_worker(bye);

  std::string all;
  for (size_t i = 0; i < frames.size(); ++i) {
    all += frames[i];
    dc::fuzz::write_file(dir / ("frame_" + std::to_string(i)), frames[i]);
  }
  dc::fuzz::write_file(dir / "conversation", all);
  hello.set_protocol_version(farm::kProtocolVersion + 1);
  dc::fuzz::write_file(dir / "foreign_hello", dc::fuzz::pack_frame(0x00, farm::serialize(hello)));
  std::printf("make_frame_seeds: %zu frames (%zu jobs) in %s\n", frames.size(), jobs.size(), dir.c_str());
  return jobs.size() == 2 ? 0 : 1;
}
