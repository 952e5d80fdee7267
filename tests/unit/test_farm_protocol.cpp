// The farm protocol's checked conversions (common/farm/farm_codec.h) and security helpers
// (common/farm/farm_security.h): what comes off the network is refused with a reason, never
// trusted, and the loopback rule and key files behave as documented.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "farm_codec.h"
#include "job_wire.h"
#include "farm_security.h"
#include "farm_testing.h"

namespace dc {
namespace {

using testing::scale_kernel;

std::string rejection(const farm::Kernel& k) {
  try {
    farm::from_proto(k);
  } catch (const farm::ProtocolError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(FarmCodec, KernelRoundTrip) {
  GeneratedKernel k = scale_kernel(1000);
  k.buffers[1].zero_init = true;
  k.buffers.push_back({"scratch0", BufferRole::scratch, DType::i64, {3, 0, 2}, false});
  k.launches[0].dynamic_smem_bytes = 4096;
  const GeneratedKernel back = farm::from_proto(farm::to_proto(k));
  EXPECT_EQ(back.source, k.source);
  EXPECT_EQ(back.variant_key, "scale");
  ASSERT_EQ(back.buffers.size(), 3u);
  EXPECT_EQ(back.buffers[1].role, BufferRole::output);
  EXPECT_TRUE(back.buffers[1].zero_init);
  EXPECT_EQ(back.buffers[2].dtype, DType::i64);
  EXPECT_EQ(back.buffers[2].shape, (Shape{3, 0, 2}));
  ASSERT_EQ(back.launches.size(), 1u);
  EXPECT_EQ(back.launches[0].grid, (std::array<int64_t, 3>{8, 1, 1}));
  EXPECT_EQ(back.launches[0].block, (std::array<int64_t, 3>{128, 1, 1}));
  EXPECT_EQ(back.launches[0].args, (std::vector<int>{0, 1}));
  EXPECT_EQ(back.launches[0].dynamic_smem_bytes, 4096);
}

// A MeasureJob crosses the wire whole: every field comes back, the sources moved, and the
// deadlines clamped to the protocol's range.
TEST(FarmCodec, MeasureJobRoundTrip) {
  MeasureJob j = testing::scale_job("w/k/h100", "h100");
  j.precision = "fp16";
  j.tolerance = Tolerance{2e-3, 1e-5};
  j.check_on_emulator = true;
  j.flops = 2000;
  j.bytes = 8000;
  j.index_bounds = {0, 17};
  j.compile_deadline = std::chrono::milliseconds(1234);
  j.run_deadline = std::chrono::milliseconds(0);  // below the range: 1 ms
  const std::string source = j.variant_kernel.source;
  MeasureJob sent = j;
  const farm::Job w = farm::to_proto(std::move(sent));
  EXPECT_TRUE(sent.variant_kernel.source.empty());  // moved onto the wire, not copied
  const MeasureJob back = farm::job_from_proto(farm::Job(w));
  EXPECT_EQ(back.job_id, j.job_id);
  EXPECT_EQ(back.gpu_type, "h100");
  EXPECT_EQ(back.workload, j.workload);
  EXPECT_EQ(back.precision, "fp16");
  EXPECT_EQ(back.variant_kernel.source, source);
  EXPECT_EQ(back.variant_kernel.variant_key, j.variant_kernel.variant_key);
  EXPECT_EQ(back.reference.template_name, "reference");
  EXPECT_EQ(back.seed, j.seed);
  EXPECT_EQ(back.tolerance.rtol, 2e-3);
  EXPECT_EQ(back.tolerance.atol, 1e-5);
  EXPECT_TRUE(back.check_on_emulator);
  EXPECT_EQ(back.estimate_us, j.estimate_us);
  EXPECT_EQ(back.flops, 2000);
  EXPECT_EQ(back.bytes, 8000);
  EXPECT_EQ(back.index_bounds, (std::vector<int64_t>{0, 17}));
  EXPECT_EQ(back.compile_deadline.count(), 1234);
  EXPECT_EQ(back.run_deadline.count(), 1);
  farm::Job bad = w;
  bad.mutable_variant()->clear_source();
  EXPECT_THROW(farm::job_from_proto(std::move(bad)), farm::ProtocolError);
}

// Version 4: the farm service reads a job's bytes without parsing its kernels. What it
// reads must be what a parsed Job holds (the same job id, names, scalars, variant source).
TEST(JobWire, TheHeadOfAJobsBytesIsWhatAParsedJobHolds) {
  MeasureJob j = testing::scale_job("w/k/h100", "h100");
  j.precision = "fp16";
  j.tolerance = Tolerance{2e-3, 1e-5};
  j.check_on_emulator = true;
  j.estimate_us = 12.5;
  j.flops = 2000;
  j.bytes = 8000;
  j.seed = 987654321987ull;
  j.index_bounds = {0, 17, 300};
  j.compile_deadline = std::chrono::milliseconds(1234);
  j.run_deadline = std::chrono::milliseconds(5678);
  const std::string bytes = farm::to_proto(MeasureJob(j)).SerializeAsString();
  std::string_view source;
  const MeasureJob head = farm::read_job_head(bytes, &source);
  farm::Job parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  const MeasureJob full = farm::job_from_proto(std::move(parsed));
  EXPECT_EQ(source, full.variant_kernel.source);
  EXPECT_FALSE(source.empty());
  EXPECT_EQ(head.job_id, full.job_id);
  EXPECT_EQ(head.gpu_type, full.gpu_type);
  EXPECT_EQ(head.workload, full.workload);
  EXPECT_EQ(head.precision, "fp16");
  EXPECT_EQ(head.variant_kernel.template_name, full.variant_kernel.template_name);
  EXPECT_EQ(head.variant_kernel.variant_key, full.variant_kernel.variant_key);
  EXPECT_TRUE(head.variant_kernel.source.empty());  // a view only: not copied
  EXPECT_EQ(head.seed, j.seed);
  EXPECT_EQ(head.tolerance.rtol, 2e-3);
  EXPECT_EQ(head.tolerance.atol, 1e-5);
  EXPECT_TRUE(head.check_on_emulator);
  EXPECT_EQ(head.estimate_us, 12.5);
  EXPECT_EQ(head.flops, 2000);
  EXPECT_EQ(head.bytes, 8000);
  EXPECT_EQ(head.index_bounds, (std::vector<int64_t>{0, 17, 300}));
  EXPECT_EQ(head.compile_deadline.count(), 1234);
  EXPECT_EQ(head.run_deadline.count(), 5678);
}

// The dispatcher appends each dispatch's lease fields to the bytes it forwards: the worker
// parses the last value of each, and everything else as the tune sent it.
TEST(JobWire, AppendedDispatchFieldsAreWhatTheWorkerParses) {
  const MeasureJob j = testing::scale_job("w/k/h100", "h100");
  farm::Job sent = farm::to_proto(MeasureJob(j));
  sent.set_lease_id(5);  // a client's own values are overridden
  sent.set_attempt(9);
  std::string bytes = sent.SerializeAsString();
  const size_t length = bytes.size();
  farm::append_dispatch_fields(bytes, 1234567890123ull, 3, 1);
  farm::Job got;
  ASSERT_TRUE(got.ParseFromString(bytes));
  EXPECT_EQ(got.lease_id(), 1234567890123ull);
  EXPECT_EQ(got.device_index(), 3);
  EXPECT_EQ(got.attempt(), 1u);
  EXPECT_EQ(got.variant().source(), j.variant_kernel.source);
  EXPECT_EQ(got.job_id(), j.job_id);
  bytes.resize(length);  // as the dispatcher restores them after a send; a requeue appends anew
  farm::append_dispatch_fields(bytes, 77, 0, 2);
  ASSERT_TRUE(got.ParseFromString(bytes));
  EXPECT_EQ(got.lease_id(), 77u);
  EXPECT_EQ(got.device_index(), 0);
  EXPECT_EQ(got.attempt(), 2u);
  const std::optional<farm::JobAddress> a = farm::read_job_address(bytes);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->lease_id, 77u);
  EXPECT_EQ(a->job_id, j.job_id);
}

// Bytes that are not a well-formed Job are refused with a reason, never read past their end.
TEST(JobWire, MalformedBytesAreProtocolErrors) {
  const MeasureJob j = testing::scale_job("w/k/h100", "h100");
  const std::string bytes = farm::to_proto(MeasureJob(j)).SerializeAsString();
  std::string_view source;
  for (size_t cut : {size_t{1}, size_t{5}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(farm::read_job_head(std::string_view(bytes).substr(0, cut), &source), farm::ProtocolError) << cut;
  // Field 2 (job id) with wire type 0 (a number) instead of 2 (bytes).
  EXPECT_THROW(farm::read_job_head(std::string("\x10\x05", 2), &source), farm::ProtocolError);
  // Wire type 3 (a group, never used by this protocol).
  EXPECT_THROW(farm::read_job_head(std::string("\x1b", 1), &source), farm::ProtocolError);
  farm::Job bad_name = farm::to_proto(MeasureJob(j));
  bad_name.set_job_id("w/\xff\xfe");
  std::string bad_bytes;
  ASSERT_TRUE(bad_name.SerializePartialToString(&bad_bytes));
  EXPECT_THROW(farm::read_job_head(bad_bytes, &source), farm::ProtocolError);
  // The worker's reading of a job it cannot parse: the lease it must answer, or nothing.
  EXPECT_FALSE(farm::read_job_address(std::string_view(bytes).substr(0, bytes.size() / 2)).has_value());
  EXPECT_FALSE(farm::read_job_address(bytes).has_value()) << "no lease in a job not dispatched";
}

// A JobOutcome on the wire reads back as the Measurement the coordinator records.
TEST(FarmCodec, JobOutcomeToResult) {
  JobOutcome o;
  o.samples_us = {3, 1, 2};
  o.max_rel_error = 1e-4;
  o.registers = 40;
  o.smem_bytes = 4096;
  o.compile_seconds = 0.5;
  o.compile_cached = true;
  o.nvrtc_version = "12.4";
  o.source_hash = "abc";
  const farm::Result r = farm::to_proto(o);
  EXPECT_EQ(farm::validate_result(r), "");
  EXPECT_TRUE(r.compile_cached());
  EXPECT_FALSE(r.has_health());  // none sampled: none sent
  const Measurement m = farm::measurement_from_result(r);
  EXPECT_EQ(m.status, JobStatus::ok);
  EXPECT_EQ(m.median_us, 2);
  EXPECT_EQ(m.max_rel_error, 1e-4);
  EXPECT_EQ(m.registers, 40);
  EXPECT_EQ(m.smem_bytes, 4096);
  EXPECT_EQ(m.nvrtc_version, "12.4");
  EXPECT_EQ(m.source_hash, "abc");
  const farm::Result f = farm::to_proto(JobOutcome::failure(JobStatus::wrong_result, "lane 3"));
  EXPECT_EQ(f.status(), "wrong_result");
  EXPECT_EQ(f.error(), "lane 3");
}

TEST(FarmCodec, BadKernelsAreProtocolErrors) {
  const farm::Kernel good = farm::to_proto(scale_kernel(1000));
  farm::Kernel k = good;
  k.clear_source();
  EXPECT_NE(rejection(k).find("no source"), std::string::npos);
  k = good;
  k.mutable_buffers(0)->set_dtype(8);  // ONNX STRING
  EXPECT_NE(rejection(k).find("unknown dtype code 8"), std::string::npos) << rejection(k);
  k = good;
  k.mutable_buffers(0)->set_shape(0, -1);
  EXPECT_NE(rejection(k).find("dimension -1"), std::string::npos);
  k = good;
  k.mutable_buffers(0)->set_shape(0, int64_t{1} << 33);  // 32 GiB of floats
  EXPECT_NE(rejection(k).find("larger than"), std::string::npos) << rejection(k);
  k = good;
  k.mutable_launches(0)->set_args(1, 2);
  EXPECT_NE(rejection(k).find("names buffer 2 of 2"), std::string::npos) << rejection(k);
  k = good;
  k.mutable_launches(0)->set_block(0, 2048);
  EXPECT_NE(rejection(k).find("block[0] = 2048"), std::string::npos) << rejection(k);
  k = good;
  k.mutable_launches(0)->set_block(1, 16);  // 128 x 16 threads
  EXPECT_NE(rejection(k).find("more than 1024 threads"), std::string::npos) << rejection(k);
  k = good;
  k.mutable_launches(0)->add_grid(1);
  EXPECT_NE(rejection(k).find("4 values"), std::string::npos) << rejection(k);
  k = good;
  k.mutable_launches(0)->set_grid(0, 0);
  EXPECT_NE(rejection(k).find("grid[0] = 0"), std::string::npos) << rejection(k);
  k = good;
  k.clear_launches();
  EXPECT_NE(rejection(k).find("0 launches"), std::string::npos) << rejection(k);
  k = good;
  k.mutable_buffers(1)->set_role(static_cast<farm::BufferRole>(7));
  EXPECT_NE(rejection(k).find("unknown buffer role 7"), std::string::npos) << rejection(k);
}

TEST(FarmCodec, FramesAreCheckedBeforeUse) {
  farm::Envelope e = farm::make_envelope();
  e.mutable_ready()->set_credits(3);
  const std::string bytes = farm::serialize(e);
  std::string why;
  auto parsed = farm::parse_envelope(bytes.data(), bytes.size(), 1024, &why);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->ready().credits(), 3u);
  EXPECT_TRUE(farm::version_ok(*parsed));
  EXPECT_STREQ(farm::body_name(*parsed), "ready");
  EXPECT_FALSE(farm::parse_envelope(bytes.data(), bytes.size(), 2, &why));
  EXPECT_NE(why.find("exceeds the limit of 2"), std::string::npos);
  const std::string junk = "\xff\xff\xff\xff\xff";
  EXPECT_FALSE(farm::parse_envelope(junk.data(), junk.size(), 1024, &why));
  EXPECT_NE(why.find("not a farm Envelope"), std::string::npos) << why;
  farm::Envelope empty = farm::make_envelope();
  const std::string eb = farm::serialize(empty);
  EXPECT_FALSE(farm::parse_envelope(eb.data(), eb.size(), 1024, &why));
  EXPECT_NE(why.find("without a known body"), std::string::npos);
  // A message from a newer peer with an unknown body field reads as "no known body".
  std::string future = eb + std::string("\xaa\x06\x00", 3);  // field 101, length 0
  EXPECT_FALSE(farm::parse_envelope(future.data(), future.size(), 1024, &why));
}

TEST(FarmCodec, ResultsAreValidatedAndSummarised) {
  farm::Result r;
  r.set_status("ok");
  for (double s : {4.0, 1.0, 3.0, 2.0}) r.add_samples_us(s);
  EXPECT_EQ(farm::validate_result(r), "");
  const Measurement m = farm::measurement_from_result(r);
  EXPECT_EQ(m.status, JobStatus::ok);
  EXPECT_DOUBLE_EQ(m.median_us, 2.5);
  EXPECT_DOUBLE_EQ(m.min_us, 1.0);
  EXPECT_GT(m.finished_unix_ms, 1600000000000);

  farm::Result bad = r;
  bad.set_status("great");
  EXPECT_NE(farm::validate_result(bad).find("unknown status"), std::string::npos);
  bad = r;
  bad.add_samples_us(std::nan(""));
  EXPECT_NE(farm::validate_result(bad).find("not a finite time"), std::string::npos);
  bad = r;
  bad.set_registers(-3);
  EXPECT_NE(farm::validate_result(bad).find("negative"), std::string::npos);
  bad = r;
  bad.clear_samples_us();
  EXPECT_NE(farm::validate_result(bad).find("without samples"), std::string::npos);

  farm::Result nan_error;
  nan_error.set_status("wrong_result");
  nan_error.set_max_rel_error(std::nan(""));
  EXPECT_EQ(farm::validate_result(nan_error), "");
  EXPECT_EQ(farm::measurement_from_result(nan_error).max_rel_error, std::numeric_limits<double>::infinity());
}

TEST(FarmSecurity, LoopbackEndpoints) {
  for (const char* e : {"tcp://127.0.0.1:5555", "tcp://127.1.2.3:*", "tcp://localhost:1", "tcp://[::1]:5555",
                        "inproc://farm", "ipc:///tmp/farm.sock", "tcp://10.0.0.1;127.0.0.1:5555"})
    EXPECT_TRUE(farm::is_loopback_endpoint(e)) << e;
  for (const char* e : {"tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://192.168.1.4:5555", "tcp://128.0.0.1:1",
                        "tcp://127.0.0.1.evil.com:1", "tcp://[::]:5555", "tcp://eth0:5555", "pgm://x", "tcp://127.0.0.256:1"})
    EXPECT_FALSE(farm::is_loopback_endpoint(e)) << e;
}

TEST(FarmSecurity, KeyFilesRoundTrip) {
  const std::string dir = ::testing::TempDir() + "dc-keys-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const farm::CurveKeyPair pair = farm::generate_curve_keypair();
  EXPECT_TRUE(farm::is_z85_key(pair.public_key));
  EXPECT_EQ(farm::curve_public_key(pair.secret_key), pair.public_key);
  const std::string path = dir + "/worker.key";
  farm::write_curve_keypair(path, pair);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const farm::CurveKeyPair back = farm::read_curve_keys(path, true);
  EXPECT_EQ(back.public_key, pair.public_key);
  EXPECT_EQ(back.secret_key, pair.secret_key);
  const farm::CurveKeyPair pub = farm::read_curve_keys(path + ".pub", false);
  EXPECT_EQ(pub.public_key, pair.public_key);
  EXPECT_TRUE(pub.secret_key.empty());
  EXPECT_THROW(farm::read_curve_keys(path + ".pub", true), UserError);

  const farm::CurveKeyPair other = farm::generate_curve_keypair();
  std::ofstream(dir + "/allow") << "# workers\n" << pair.public_key << "\n\npublic-key = \"" << other.public_key << "\"\n";
  EXPECT_EQ(farm::read_public_keys(dir + "/allow"), (std::vector<std::string>{pair.public_key, other.public_key}));
  std::ofstream(dir + "/bad") << pair.public_key << "\nnot-a-key\n";
  try {
    farm::read_public_keys(dir + "/bad");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad:2: not a CURVE public key"), std::string::npos) << e.what();
  }
  // A public key that does not belong to the secret one.
  std::ofstream(dir + "/mixed") << "public-key = \"" << other.public_key << "\"\nsecret-key = \"" << pair.secret_key << "\"\n";
  std::filesystem::permissions(dir + "/mixed", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  try {
    farm::read_curve_keys(dir + "/mixed", true);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("does not belong to secret-key"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A secret key file that group or others can read is refused, as ssh refuses one; a public
// key file may be readable by anyone.
TEST(FarmSecurity, SecretKeyFileMustBePrivate) {
  const std::string dir = ::testing::TempDir() + "dc-keymode-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/coordinator.key";
  farm::write_curve_keypair(path, farm::generate_curve_keypair());
  for (const int mode : {0640, 0604, 0644, 0660}) {
    ASSERT_EQ(::chmod(path.c_str(), static_cast<mode_t>(mode)), 0);
    try {
      farm::read_curve_keys(path, true);
      FAIL() << "mode " << std::oct << mode << " accepted";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("readable by group or others"), std::string::npos) << what;
      EXPECT_NE(what.find("chmod 600"), std::string::npos) << what;
    }
  }
  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);
  EXPECT_FALSE(farm::read_curve_keys(path, true).secret_key.empty());
  ASSERT_EQ(::chmod((path + ".pub").c_str(), 0644), 0);
  EXPECT_FALSE(farm::read_curve_keys(path + ".pub", false).public_key.empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dc
