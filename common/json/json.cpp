#include "json/json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <unordered_set>
#include <limits>

#include "ir/error.h"

namespace dc::json {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Recursive descent over the RFC 8259 grammar. Newlines occur only in whitespace (raw
// control characters are not allowed in strings), so line and column are tracked there.
class Parser {
 public:
  Parser(std::string_view text, const std::string& origin, const ParseLimits& limits)
      : s_(text), origin_(origin), limits_(limits) {}

  Value document() {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") fail("a byte-order mark is not allowed in JSON");
    skip_space();
    if (at_end()) fail("empty document: expected a JSON value");
    Value v = value(0);
    skip_space();
    if (!at_end()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
    throw_user_error(origin_, ":", line_, ":", pos - line_start_ + 1, ": not valid JSON: ", what);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  // A description of the byte at the current position, for messages.
  std::string found() const {
    if (at_end()) return "end of input";
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x21 && c < 0x7F) return std::string("'") + s_[pos_] + "'";
    return str_cat("byte 0x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
  }

  void skip_space() {
    for (; !at_end(); ++pos_) {
      const char c = s_[pos_];
      if (c == '\n') {
        ++line_;
        line_start_ = pos_ + 1;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        return;
      }
    }
  }

  void expect(char c, const char* what) {
    if (peek() != c) fail(str_cat("expected ", what, ", found ", found()));
    ++pos_;
  }

  Value value(int depth) {
    Value v;
    v.line = line_;
    v.column = static_cast<int>(pos_ - line_start_ + 1);
    const char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= limits_.max_depth)
        fail(str_cat("nested deeper than ", limits_.max_depth, " arrays and objects (dc's limit)"));
      if (c == '{')
        object(v, depth + 1);
      else
        array(v, depth + 1);
    } else if (c == '"') {
      v.type = Type::string;
      v.text = string();
    } else if (c == '-' || is_digit(c)) {
      number(v);
    } else if (literal("true")) {
      v.type = Type::boolean;
      v.boolean = true;
    } else if (literal("false")) {
      v.type = Type::boolean;
    } else if (!literal("null")) {
      fail("expected a JSON value, found " + found());
    }
    return v;
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  void object(Value& v, int depth) {
    v.type = Type::object;
    ++pos_;  // '{'
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    std::unordered_set<std::string> keys;
    for (;;) {
      skip_space();
      if (peek() != '"') fail("expected a string key, found " + found());
      const size_t key_pos = pos_;
      std::string key = string();
      if (!keys.insert(key).second) fail_at(key_pos, "key \"" + key + "\" given twice in one object");
      skip_space();
      expect(':', "':' after an object key");
      skip_space();
      Value member = value(depth);
      v.members.push_back({std::move(key), std::move(member)});
      skip_space();
      if (peek() == '}') {
        ++pos_;
        return;
      }
      expect(',', "',' or '}' in an object");
    }
  }

  void array(Value& v, int depth) {
    v.type = Type::array;
    ++pos_;  // '['
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      skip_space();
      v.items.push_back(value(depth));
      skip_space();
      if (peek() == ']') {
        ++pos_;
        return;
      }
      expect(',', "',' or ']' in an array");
    }
  }

  void digits(const char* after) {
    if (!is_digit(peek())) fail(str_cat("expected a digit ", after, ", found ", found()));
    while (is_digit(peek())) ++pos_;
  }

  void number(Value& v) {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (is_digit(peek())) fail("leading zeros are not allowed in a JSON number");
    } else {
      digits(pos_ > start ? "after '-'" : "");
    }
    if (peek() == '.') {
      ++pos_;
      digits("after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits("in the exponent");
    }
    v.type = Type::number;
    v.text = std::string(s_.substr(start, pos_ - start));
    const auto [end, ec] = std::from_chars(v.text.data(), v.text.data() + v.text.size(), v.number);
    if (ec == std::errc::result_out_of_range) {
      // libstdc++ reports subnormal and underflowing results as out of range too (and then
      // leaves the value unset): strtod gives them, and HUGE_VAL for a real overflow.
      v.number = std::strtod(v.text.c_str(), nullptr);
      if (std::isinf(v.number)) fail_at(start, "number " + v.text + " is out of range of a double");
    } else if (ec != std::errc() || end != v.text.data() + v.text.size()) {
      fail_at(start, "malformed number " + v.text);
    }
  }

  uint32_t hex4() {
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex_value(peek());
      if (h < 0) fail("expected 4 hex digits after \\u, found " + found());
      cp = cp * 16 + static_cast<uint32_t>(h);
      ++pos_;
    }
    return cp;
  }

  void escape(std::string& out) {
    const size_t at = pos_;
    ++pos_;  // '\'
    const char c = peek();
    ++pos_;
    switch (c) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: fail_at(at, "invalid escape sequence in a string");
    }
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(at, "unpaired low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.substr(pos_, 2) != "\\u") fail_at(at, "unpaired high surrogate in a \\u escape");
      pos_ += 2;
      const uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) fail_at(at, "unpaired high surrogate in a \\u escape");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  // One UTF-8 sequence, checked (no overlongs, no surrogates, at most U+10FFFF).
  void utf8(std::string& out) {
    const size_t at = pos_;
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s_[at + i]); };
    const unsigned char b0 = byte(0);
    int n = 0;
    uint32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) { n = 2; cp = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) { n = 3; cp = b0 & 0x0F; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { n = 4; cp = b0 & 0x07; }
    else fail("invalid UTF-8 in a string");
    if (at + n > s_.size()) fail("truncated UTF-8 sequence in a string");
    for (int i = 1; i < n; ++i) {
      if ((byte(i) & 0xC0) != 0x80) fail("invalid UTF-8 in a string");
      cp = (cp << 6) | (byte(i) & 0x3F);
    }
    const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      fail("invalid UTF-8 in a string");
    out.append(s_.substr(at, n));
    pos_ += n;
  }

  std::string string() {
    const size_t start = pos_;
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (at_end()) fail_at(start, "unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\\') {
        escape(out);
      } else if (c < 0x20) {
        fail("raw control character in a string (write it as a \\u escape)");
      } else if (c < 0x80) {
        out += static_cast<char>(c);
        ++pos_;
      } else {
        utf8(out);
      }
    }
  }

  std::string_view s_;
  const std::string& origin_;
  ParseLimits limits_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

const char* type_name(Type t) {
  switch (t) {
    case Type::null: return "null";
    case Type::boolean: return "a boolean";
    case Type::number: return "a number";
    case Type::string: return "a string";
    case Type::array: return "an array";
    case Type::object: return "an object";
  }
  return "?";
}

const Value* Value::find(std::string_view key) const {
  for (const auto& m : members)
    if (m.key == key) return &m.value;
  return nullptr;
}

bool Value::integer(int64_t* out) const {
  if (type != Type::number || text.find_first_of(".eE") != std::string::npos) return false;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return false;
  *out = v;
  return true;
}

Value parse(std::string_view text, const std::string& origin, const ParseLimits& limits) {
  return Parser(text, origin, limits).document();
}

}  // namespace dc::json
