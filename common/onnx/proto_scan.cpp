#include "onnx/proto_scan.h"

namespace dc {

namespace {

// Field numbers in onnx.proto.
constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kTensorRawData = 9;
constexpr uint32_t kLengthDelimited = 2;

// One pass over a message's fields; every read is bounds-checked.
class Reader {
 public:
  Reader(const char* begin, const char* end) : p_(begin), end_(end) {}
  bool done() const { return p_ == end_; }
  const char* pos() const { return p_; }

  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      const auto b = static_cast<uint8_t>(*p_++);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

  // The next field: number, wire type and its payload [*payload, *payload_end) for a
  // length-delimited one. False on malformed input (and groups, which ONNX never uses).
  bool field(uint32_t* number, uint32_t* wire, const char** payload, const char** payload_end) {
    uint64_t tag = 0;
    if (!varint(&tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return false;
    *number = static_cast<uint32_t>(tag >> 3);
    *wire = static_cast<uint32_t>(tag & 7);
    uint64_t v = 0;
    switch (*wire) {
      case 0: return varint(&v);
      case 1: return skip(8);
      case 5: return skip(4);
      case kLengthDelimited:
        if (!varint(&v) || v > static_cast<uint64_t>(end_ - p_)) return false;
        *payload = p_;
        *payload_end = p_ + v;
        p_ += v;
        return true;
      default: return false;
    }
  }

 private:
  bool skip(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    p_ += n;
    return true;
  }
  const char* p_;
  const char* end_;
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_message(std::string& out, uint32_t number, const std::string& body) {
  put_varint(out, (uint64_t{number} << 3) | kLengthDelimited);
  put_varint(out, body.size());
  out += body;
}

// A TensorProto without its raw_data when that is large: *slice says where it was.
bool slim_tensor(const char* begin, const char* end, const char* file, size_t threshold, std::string* out,
                 std::optional<FileSlice>* slice) {
  Reader r(begin, end);
  const char* copied = begin;  // fields before this are in *out
  int raw_fields = 0;
  while (!r.done()) {
    const char* start = r.pos();
    uint32_t number = 0, wire = 0;
    const char *payload = nullptr, *payload_end = nullptr;
    if (!r.field(&number, &wire, &payload, &payload_end)) return false;
    if (number == kTensorRawData && ++raw_fields > 1) return false;  // the last one wins: rare, leave it to protobuf
    if (number == kTensorRawData && wire == kLengthDelimited &&
        static_cast<size_t>(payload_end - payload) >= threshold) {
      out->append(copied, start);
      copied = r.pos();
      *slice = FileSlice{static_cast<uint64_t>(payload - file), static_cast<uint64_t>(payload_end - payload)};
    }
  }
  out->append(copied, end);
  return true;
}

bool slim_graph(const char* begin, const char* end, const char* file, size_t threshold, SlimModel* m,
                std::string* out) {
  Reader r(begin, end);
  int initializer = 0;
  while (!r.done()) {
    const char* start = r.pos();
    uint32_t number = 0, wire = 0;
    const char *payload = nullptr, *payload_end = nullptr;
    if (!r.field(&number, &wire, &payload, &payload_end)) return false;
    if (number == kGraphInitializer && wire == kLengthDelimited) {
      std::string body;
      std::optional<FileSlice> slice;
      if (!slim_tensor(payload, payload_end, file, threshold, &body, &slice)) return false;
      if (slice) {
        m->raw_data[initializer] = *slice;
        put_message(*out, number, body);
        ++initializer;
        continue;
      }
      ++initializer;
    }
    out->append(start, r.pos());
  }
  return true;
}

}  // namespace

std::optional<SlimModel> slim_model(const char* data, size_t size, size_t threshold) {
  SlimModel m;
  Reader r(data, data + size);
  int graphs = 0;
  while (!r.done()) {
    const char* start = r.pos();
    uint32_t number = 0, wire = 0;
    const char *payload = nullptr, *payload_end = nullptr;
    if (!r.field(&number, &wire, &payload, &payload_end)) return std::nullopt;
    if (number == kModelGraph && wire == kLengthDelimited) {
      // A repeated message field merges; keep it simple and let protobuf handle that case.
      if (++graphs > 1) return std::nullopt;
      std::string body;
      if (!slim_graph(payload, payload_end, data, threshold, &m, &body)) return std::nullopt;
      put_message(m.proto, number, body);
      continue;
    }
    m.proto.append(start, r.pos());
  }
  return m;
}

}  // namespace dc
