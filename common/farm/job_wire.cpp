#include "job_wire.h"

#include <google/protobuf/stubs/common.h>

#include <cstring>

#include "farm_codec.h"

namespace dc::farm {
namespace {

// Protobuf's wire types (https://protobuf.dev/programming-guides/encoding/).
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

// Reads the protobuf wire format front to back; any overrun or unknown wire type throws.
struct WireReader {
  std::string_view in;

  bool done() const { return in.empty(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (in.empty()) throw ProtocolError("a job's bytes end inside a number");
      const auto b = static_cast<uint8_t>(in.front());
      in.remove_prefix(1);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80u) == 0) return v;
    }
    throw ProtocolError("a job's bytes hold a number longer than 10 bytes");
  }
  std::string_view take(uint64_t n) {
    if (n > in.size()) throw ProtocolError("a job's bytes end inside a field");
    std::string_view out = in.substr(0, n);
    in.remove_prefix(n);
    return out;
  }
  std::string_view length_delimited() { return take(varint()); }
  double fixed64_double() {
    const std::string_view b = take(8);
    uint64_t bits = 0;
    for (int i = 7; i >= 0; --i) bits = (bits << 8) | static_cast<uint8_t>(b[static_cast<size_t>(i)]);
    double d = 0;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case kVarint: varint(); return;
      case kFixed64: take(8); return;
      case kLength: length_delimited(); return;
      case kFixed32: take(4); return;
      default: throw ProtocolError(str_cat("a job's bytes hold wire type ", wire_type));
    }
  }
  // The next field's number and wire type.
  std::pair<uint32_t, uint32_t> tag() {
    const uint64_t t = varint();
    if ((t >> 3) == 0 || (t >> 3) > (uint64_t{1} << 29)) throw ProtocolError("a job's bytes hold field number 0");
    return {static_cast<uint32_t>(t >> 3), static_cast<uint32_t>(t & 7)};
  }
};

void expect(uint32_t got, uint32_t want, uint32_t field) {
  if (got != want) throw ProtocolError(str_cat("a job's field ", field, " has wire type ", got, ", not ", want));
}

std::string utf8(std::string_view s, const char* what) {
  if (!google::protobuf::internal::IsStructurallyValidUTF8(s.data(), static_cast<int>(s.size())))
    throw ProtocolError(str_cat("a job's ", what, " is not UTF-8"));
  return std::string(s);
}

void read_variant_head(std::string_view bytes, GeneratedKernel& k, std::string_view* source) {
  WireReader r{bytes};
  while (!r.done()) {
    const auto [field, type] = r.tag();
    switch (field) {
      case 1: expect(type, kLength, field); k.template_name = utf8(r.length_delimited(), "template name"); break;
      case 2: expect(type, kLength, field); k.variant_key = utf8(r.length_delimited(), "variant key"); break;
      case 3: expect(type, kLength, field); *source = r.length_delimited(); break;
      default: r.skip(type);  // buffers and launches: the worker reads them
    }
  }
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

}  // namespace

MeasureJob read_job_head(std::string_view bytes, std::string_view* variant_source) {
  MeasureJob job;
  // As job_from_proto has them for an absent field (proto3: empty, zero).
  job.precision.clear();
  job.compile_deadline = job.run_deadline = std::chrono::milliseconds(0);
  *variant_source = {};
  WireReader r{bytes};
  while (!r.done()) {
    const auto [field, type] = r.tag();
    switch (field) {
      case 2: expect(type, kLength, field); job.job_id = utf8(r.length_delimited(), "job id"); break;
      case 3: expect(type, kLength, field); job.gpu_type = utf8(r.length_delimited(), "GPU type"); break;
      case 5: expect(type, kLength, field); job.workload = utf8(r.length_delimited(), "workload"); break;
      case 6:
        expect(type, kLength, field);
        job.variant_kernel = GeneratedKernel{};
        read_variant_head(r.length_delimited(), job.variant_kernel, variant_source);
        break;
      case 8: expect(type, kVarint, field); job.seed = r.varint(); break;
      case 9: expect(type, kFixed64, field); job.tolerance.rtol = r.fixed64_double(); break;
      case 10: expect(type, kVarint, field); job.compile_deadline = std::chrono::milliseconds(static_cast<uint32_t>(r.varint())); break;
      case 11: expect(type, kVarint, field); job.run_deadline = std::chrono::milliseconds(static_cast<uint32_t>(r.varint())); break;
      case 12: expect(type, kVarint, field); job.check_on_emulator = r.varint() != 0; break;
      case 13: expect(type, kFixed64, field); job.estimate_us = r.fixed64_double(); break;
      case 15: expect(type, kLength, field); job.precision = utf8(r.length_delimited(), "precision"); break;
      case 16:
        if (type == kVarint) {
          job.index_bounds.push_back(static_cast<int64_t>(r.varint()));
        } else {
          expect(type, kLength, field);
          WireReader packed{r.length_delimited()};
          while (!packed.done()) job.index_bounds.push_back(static_cast<int64_t>(packed.varint()));
        }
        break;
      case 17: expect(type, kVarint, field); job.flops = static_cast<int64_t>(r.varint()); break;
      case 18: expect(type, kVarint, field); job.bytes = static_cast<int64_t>(r.varint()); break;
      case 19: expect(type, kFixed64, field); job.tolerance.atol = r.fixed64_double(); break;
      default: r.skip(type);  // the reference kernel, the dispatch fields, fields added later
    }
  }
  return job;
}

void append_dispatch_fields(std::string& bytes, uint64_t lease_id, int32_t device_index, uint32_t attempt) {
  put_varint(bytes, (1u << 3) | kVarint);
  put_varint(bytes, lease_id);
  put_varint(bytes, (4u << 3) | kVarint);
  put_varint(bytes, static_cast<uint64_t>(static_cast<int64_t>(device_index)));  // int32: sign-extended
  put_varint(bytes, (14u << 3) | kVarint);
  put_varint(bytes, attempt);
}

std::optional<JobAddress> read_job_address(std::string_view bytes) {
  JobAddress a;
  try {
    WireReader r{bytes};
    while (!r.done()) {
      const auto [field, type] = r.tag();
      if (field == 1 && type == kVarint) a.lease_id = r.varint();
      else if (field == 4 && type == kVarint) a.device_index = static_cast<int32_t>(r.varint());
      else if (field == 2 && type == kLength) a.job_id = std::string(r.length_delimited());
      else r.skip(type);
    }
  } catch (const ProtocolError&) {
    return std::nullopt;
  }
  if (a.lease_id == 0) return std::nullopt;
  if (!google::protobuf::internal::IsStructurallyValidUTF8(a.job_id.data(), static_cast<int>(a.job_id.size())))
    a.job_id.clear();
  return a;
}

}  // namespace dc::farm
