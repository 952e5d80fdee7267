// The farm protocol's messages (common/farm/farm.proto) as both sides use them: the version, the
// parse of one frame with its size limit, and the conversions between the wire records and
// dc's own (GeneratedKernel, Measurement). Everything that comes off the network is checked
// here before anything else reads it: a bad frame or a bad kernel description is a
// ProtocolError (or nullopt with the reason), never an abort.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "farm.pb.h"
#include "farm/measure_job.h"
#include "farm/measurement.h"
#include "ir/error.h"
#include "ir/kernel.h"

namespace dc::farm {

// 3: jobs and results travel in batches (JobBatch, ResultBatch), which a version 2 peer would
// drop as bodies it does not know. 4: jobs travel as bytes (TuneJob.job, JobBatch.jobs) that
// only the worker parses and checks: a version 3 worker would drop a whole batch for one bad
// job, where a version 4 worker answers that job alone as failed.
inline constexpr uint32_t kProtocolVersion = 4;
// Largest frame either side accepts (also set as ZMQ_MAXMSGSIZE, so that libzmq drops a
// peer that sends more before it is buffered). A job is two kernel sources: tens of KiB.
inline constexpr size_t kDefaultMaxMessageBytes = size_t{16} << 20;

// Network input that breaks the protocol's rules (the first error tier: not a bug in dc).
struct ProtocolError : UserError {
  using UserError::UserError;
};

// An Envelope with protocol_version set.
Envelope make_envelope();
std::string serialize(const Envelope& e);

// Parses one frame. nullopt, with the reason in *why, for a frame over `max_bytes`, one that
// does not parse, or one without a known body. The version is NOT checked here (the
// coordinator answers a foreign Hello with Refused); see version_ok.
std::optional<Envelope> parse_envelope(const void* data, size_t size, size_t max_bytes,
                                       std::string* why);
inline bool version_ok(const Envelope& e) { return e.protocol_version() == kProtocolVersion; }
// "hello", "job", ...: for log lines.
const char* body_name(const Envelope& e);

// GeneratedKernel <-> wire. from_proto checks everything a worker later relies on (dtype
// codes, shapes, launch dimensions, buffer indices, sizes) and throws ProtocolError.
Kernel to_proto(const GeneratedKernel& k);
GeneratedKernel from_proto(const Kernel& k);
// The same, the source moved out of `k` instead of copied (the farm service's hot path).
GeneratedKernel from_proto(Kernel&& k);

// A duration as the protocol's milliseconds (deadlines, heartbeats): at least 1, at most 2^31.
uint32_t wire_ms(std::chrono::milliseconds ms);

// MeasureJob <-> wire, the kernels' sources moved rather than copied (the farm's hot path).
// job_from_proto checks the kernels as from_proto does (ProtocolError); the tolerance is
// checked where it is applied (the worker's executor).
Job to_proto(MeasureJob&& job);
MeasureJob job_from_proto(Job&& job);

// JobOutcome -> wire, as a worker sends it (lease, job id and device index: the caller's).
Result to_proto(const JobOutcome& o);

// Checks a Result from a worker: a known status name, finite non-negative samples, at most
// kMaxSamples of them, sane resource figures. "" when valid, else why not.
inline constexpr int kMaxSamples = 100000;
std::string validate_result(const Result& r);

// The Measurement of a valid Result (validate_result): status, samples and their summary,
// errors, resources, provenance. The caller fills in what the job knows (workload, variant
// key, GPU type, worker, estimate, attempts).
Measurement measurement_from_result(const Result& r);

// Milliseconds since the Unix epoch (heartbeats, finished_unix_ms).
int64_t unix_ms_now();

}  // namespace dc::farm
