// What the farm service is doing, as plain data: built by the service's thread
// (FarmService, farm_service.h) and read by `status` (its StatusReply), by the Prometheus
// exposition (metrics_text.h) and by the HTML status page (status_page.h). Nothing here
// refers back to the service's state, so a copy can cross threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dc {

struct ServiceView {
  struct Device {
    std::string worker_id;
    int32_t index = 0;
    std::string gpu_type;
    int leases = 0;              // jobs it holds now
    double busy_seconds = 0;     // its run phases (check + timing) since it joined the service
    double joined_seconds = 0;   // how long it has been with the service
    double busy_fraction = 0;    // busy_seconds / joined_seconds, at most 1
  };
  struct Worker {
    std::string worker_id, host;
    std::vector<std::string> gpu_types;  // one per device
    std::string state;                   // idle, busy
    int leases = 0;
    int64_t jobs_done = 0, jobs_failed = 0;
    double busy_fraction = 0;            // the mean of its devices'
  };
  struct Tune {
    uint64_t id = 0;
    std::string client_host, model;
    std::vector<std::string> gpu_types;
    int priority = 1;
    int64_t submitted = 0, done = 0, queued = 0, measured = 0, from_db = 0, joined = 0;
    double elapsed_seconds = 0;
    // Seconds until the jobs submitted so far are answered, at the tune's rate so far; -1
    // while nothing has been answered.
    double eta_seconds = -1;
    bool connected = true;               // false: silent, within its grace period
  };
  struct Queue {
    std::string gpu_type;
    int64_t queued = 0, in_flight = 0;
    int devices = 0;
  };
  // Job latency: from a job's hand-over to the broker to its result, seconds.
  struct Histogram {
    std::vector<double> bounds;          // upper bounds, ascending; +Inf implied
    std::vector<int64_t> counts;         // per bound and one for +Inf, not cumulative
    double sum = 0;
    int64_t count = 0;
  };

  std::string service_id;
  double uptime_seconds = 0;
  std::vector<Worker> workers;
  std::vector<Device> devices;
  std::vector<Tune> tunes;
  std::vector<Queue> queues;
  std::map<std::string, int64_t> results_by_status;   // results from workers, by final status
  std::map<std::string, int64_t> recorded_by_status;  // measurement rows this service added
  int64_t measured = 0;           // results from workers (jobs measured)
  int64_t answered_measured = 0;  // outcomes to the tune whose share paid for the job
  int64_t answered_from_db = 0, joined = 0, cancelled = 0;
  int64_t tunes_started = 0, tunes_resumed = 0;
  Histogram latency;
};

}  // namespace dc
