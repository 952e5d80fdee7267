// A minimal streaming JSON writer for machine-readable command output (inspect --json).
// Handles nesting and commas; strings are escaped per RFC 8259.
#pragma once

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace dc {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& os) : os_(os) {}

  JsonWriter& begin_object() { value_prefix(); os_ << '{'; first_.push_back(true); return *this; }
  JsonWriter& end_object() { first_.pop_back(); os_ << '}'; return *this; }
  JsonWriter& begin_array() { value_prefix(); os_ << '['; first_.push_back(true); return *this; }
  JsonWriter& end_array() { first_.pop_back(); os_ << ']'; return *this; }

  JsonWriter& key(std::string_view k) {
    comma();
    write_string(k);
    os_ << ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(std::string_view s) { value_prefix(); write_string(s); return *this; }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b) { value_prefix(); os_ << (b ? "true" : "false"); return *this; }
  JsonWriter& value(int64_t v) { value_prefix(); os_ << v; return *this; }
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(size_t v) { value_prefix(); os_ << v; return *this; }
  JsonWriter& value(double v) {
    value_prefix();
    if (std::isfinite(v)) os_ << fmt::format("{}", v);  // shortest text that round-trips
    else os_ << "null";  // JSON has no inf/nan
    return *this;
  }
  JsonWriter& value(const std::vector<int64_t>& v) {
    begin_array();
    for (int64_t x : v) value(x);
    return end_array();
  }
  template <class T>
  JsonWriter& field(std::string_view k, const T& v) { return key(k).value(v); }

 private:
  void comma() {
    if (first_.empty()) return;
    if (!first_.back()) os_ << ',';
    first_.back() = false;
  }
  void value_prefix() {
    if (after_key_) after_key_ = false;
    else comma();
  }
  void write_string(std::string_view s) {
    os_ << '"';
    for (char c : s) {
      switch (c) {
        case '"': os_ << "\\\""; break;
        case '\\': os_ << "\\\\"; break;
        case '\n': os_ << "\\n"; break;
        case '\r': os_ << "\\r"; break;
        case '\t': os_ << "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            const char* hex = "0123456789abcdef";
            os_ << "\\u00" << hex[(c >> 4) & 0xf] << hex[c & 0xf];
          } else {
            os_ << c;
          }
      }
    }
    os_ << '"';
  }
  std::ostream& os_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace dc
