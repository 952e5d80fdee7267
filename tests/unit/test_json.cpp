// The strict JSON reader (common/json): RFC 8259 grammar, numbers, escapes, errors with
// line:column, duplicate keys, depth limit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ir/error.h"
#include "json/json.h"

namespace dc {
namespace {

json::Value parse(const std::string& text) { return json::parse(text, "t.json"); }

// The UserError message of parsing `text`, or "" if it parsed.
std::string error_of(const std::string& text, json::ParseLimits limits = {}) {
  try {
    json::parse(text, "t.json", limits);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Json, ScalarsAndContainers) {
  const json::Value v = parse(R"( {"a": [1, true, false, null, "x"], "b": {}, "c": []} )");
  ASSERT_EQ(v.type, json::Type::object);
  ASSERT_EQ(v.members.size(), 3u);
  EXPECT_EQ(v.members[0].key, "a");  // document order kept
  EXPECT_EQ(v.members[2].key, "c");
  EXPECT_EQ(v.members[2].value.type, json::Type::array);
  const json::Value& a = *v.find("a");
  ASSERT_EQ(a.items.size(), 5u);
  EXPECT_EQ(a.items[0].type, json::Type::number);
  EXPECT_EQ(a.items[0].number, 1.0);
  EXPECT_TRUE(a.items[1].boolean);
  EXPECT_EQ(a.items[2].type, json::Type::boolean);
  EXPECT_FALSE(a.items[2].boolean);
  EXPECT_EQ(a.items[3].type, json::Type::null);
  EXPECT_EQ(a.items[4].text, "x");
  EXPECT_EQ(v.find("b")->type, json::Type::object);
  EXPECT_TRUE(v.find("c")->items.empty());
  EXPECT_EQ(v.find("d"), nullptr);
  EXPECT_EQ(parse("7").number, 7.0);  // any value at the top level
  EXPECT_EQ(parse("\"s\"").text, "s");
}

TEST(Json, Numbers) {
  EXPECT_EQ(parse("-12").number, -12.0);
  EXPECT_EQ(parse("0.5").number, 0.5);
  EXPECT_EQ(parse("1e3").number, 1000.0);
  EXPECT_EQ(parse("1E+3").number, 1000.0);
  EXPECT_EQ(parse("-2.5e-3").number, -0.0025);
  EXPECT_EQ(parse("1.7976931348623157e308").number, 1.7976931348623157e308);
  EXPECT_EQ(parse("4.9e-324").number, 4.9e-324);  // subnormal, not zero
  EXPECT_EQ(parse("1e-400").number, 0.0);         // underflows to zero, as strtod
  const json::Value neg_zero = parse("-0");
  EXPECT_EQ(neg_zero.number, 0.0);
  EXPECT_TRUE(std::signbit(neg_zero.number));
  EXPECT_TRUE(std::signbit(parse("-0.0e0").number));
  // The shortest round-trip text JsonWriter writes reads back to the same double.
  EXPECT_EQ(parse("0.1").number, 0.1);
  EXPECT_EQ(parse("1047.8125").number, 1047.8125);
  EXPECT_EQ(parse("123456789.12345679").number, 123456789.12345679);

  int64_t i = 1;
  EXPECT_TRUE(parse("-0").integer(&i));
  EXPECT_EQ(i, 0);
  EXPECT_TRUE(parse("9223372036854775807").integer(&i));
  EXPECT_EQ(i, INT64_MAX);
  EXPECT_TRUE(parse("-9223372036854775808").integer(&i));
  EXPECT_EQ(i, INT64_MIN);
  i = 5;
  EXPECT_FALSE(parse("9223372036854775808").integer(&i));  // out of int64
  EXPECT_FALSE(parse("1e3").integer(&i));
  EXPECT_FALSE(parse("1.0").integer(&i));
  EXPECT_FALSE(parse("\"1\"").integer(&i));
  EXPECT_EQ(i, 5);  // untouched on failure

  for (const char* bad : {"+1", "01", "-", "1.", ".5", "1e", "1e+", "0x10", "NaN", "Infinity",
                          "-Infinity", "1.5.2", "--1", "- 1"})
    EXPECT_NE(error_of(bad).find("not valid JSON"), std::string::npos) << bad;
  EXPECT_NE(error_of("1e400").find("out of range of a double"), std::string::npos);
  EXPECT_NE(error_of("01").find("leading zeros"), std::string::npos);
}

TEST(Json, StringEscapes) {
  EXPECT_EQ(parse(R"("a\"b\\c\/d\b\f\n\r\t")").text, "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parse(R"("\u0041\u00e9\u20AC")").text, "A\xC3\xA9\xE2\x82\xAC");  // A, é, €
  EXPECT_EQ(parse(R"("\u0000")").text, std::string(1, '\0'));
  // A surrogate pair is one code point: U+1F600 in UTF-8.
  EXPECT_EQ(parse(R"("\ud83d\ude00")").text, "\xF0\x9F\x98\x80");
  EXPECT_EQ(parse(R"("\uDBFF\uDFFF")").text, "\xF4\x8F\xBF\xBF");  // U+10FFFF
  // Raw UTF-8 passes through unchanged.
  EXPECT_EQ(parse("\"\xC3\xA9\xF0\x9F\x98\x80\"").text, "\xC3\xA9\xF0\x9F\x98\x80");

  EXPECT_NE(error_of(R"("\ud83d")").find("unpaired high surrogate"), std::string::npos);
  EXPECT_NE(error_of(R"("\ud83dx")").find("unpaired high surrogate"), std::string::npos);
  EXPECT_NE(error_of(R"("\ud83d\u0041")").find("unpaired high surrogate"), std::string::npos);
  EXPECT_NE(error_of(R"("\ude00")").find("unpaired low surrogate"), std::string::npos);
  EXPECT_NE(error_of(R"("\u12G4")").find("4 hex digits"), std::string::npos);
  EXPECT_NE(error_of(R"("\x41")").find("invalid escape"), std::string::npos);
  EXPECT_NE(error_of(R"("\')").find("invalid escape"), std::string::npos);
  EXPECT_NE(error_of("\"a\nb\"").find("raw control character"), std::string::npos);
  EXPECT_NE(error_of("\"a\tb\"").find("raw control character"), std::string::npos);
  EXPECT_NE(error_of("\"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("'abc'").find("expected a JSON value"), std::string::npos);
  // Invalid UTF-8: a lone continuation byte, an overlong '/', an encoded surrogate, a
  // truncated sequence, a code point above U+10FFFF.
  for (const char* bad : {"\"\x80\"", "\"\xC0\xAF\"", "\"\xED\xA0\x80\"", "\"\xE2\x82\"",
                          "\"\xF4\x90\x80\x80\""})
    EXPECT_NE(error_of(bad).find("UTF-8"), std::string::npos) << bad;
  EXPECT_NE(error_of("\xEF\xBB\xBF{}").find("byte-order mark"), std::string::npos);
}

TEST(Json, DuplicateKeysAreRejected) {
  EXPECT_EQ(error_of(R"({"a": 1,
  "a": 2})"), "t.json:2:3: not valid JSON: key \"a\" given twice in one object");
  // The same key in different objects is fine; keys compare after unescaping.
  EXPECT_EQ(parse(R"({"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]})").members.size(), 2u);
  EXPECT_NE(error_of(R"({"a": 1, "\u0061": 2})").find("given twice"), std::string::npos);
}

TEST(Json, TrailingGarbageAndStructureErrors) {
  EXPECT_EQ(error_of("{} x"), "t.json:1:4: not valid JSON: unexpected text after the JSON value");
  EXPECT_NE(error_of("[1] [2]").find("unexpected text"), std::string::npos);
  EXPECT_NE(error_of("truex").find("unexpected text"), std::string::npos);
  EXPECT_EQ(error_of(""), "t.json:1:1: not valid JSON: empty document: expected a JSON value");
  EXPECT_NE(error_of("  \n ").find("empty document"), std::string::npos);
  EXPECT_NE(error_of("[1,]").find("expected a JSON value"), std::string::npos);
  EXPECT_NE(error_of("{\"a\":1,}").find("expected a string key"), std::string::npos);
  EXPECT_NE(error_of("{a:1}").find("expected a string key"), std::string::npos);
  EXPECT_NE(error_of("{\"a\" 1}").find("expected ':'"), std::string::npos);
  EXPECT_NE(error_of("[1 2]").find("expected ',' or ']'"), std::string::npos);
  EXPECT_NE(error_of("{\"a\":1").find("expected ',' or '}'"), std::string::npos);
  EXPECT_NE(error_of("[1, // c\n 2]").find("expected a JSON value"), std::string::npos);
  EXPECT_NE(error_of("tru").find("expected a JSON value"), std::string::npos);
  EXPECT_NE(error_of("\v1").find("expected a JSON value, found byte 0x0b"), std::string::npos);
  // Whitespace is space, tab, CR and LF only; CRLF files read.
  EXPECT_EQ(parse("\r\n[\t1\r\n]\r\n").items.size(), 1u);
}

TEST(Json, LineAndColumn) {
  const json::Value v = parse("{\n  \"a\": [10,\n    20]\n}");
  EXPECT_EQ(v.line, 1);
  EXPECT_EQ(v.column, 1);
  const json::Value& a = *v.find("a");
  EXPECT_EQ(a.line, 2);
  EXPECT_EQ(a.column, 8);
  EXPECT_EQ(a.items[1].line, 3);
  EXPECT_EQ(a.items[1].column, 5);
  EXPECT_EQ(error_of("{\n  \"a\": [10,\n    20 30]\n}"),
            "t.json:3:8: not valid JSON: expected ',' or ']' in an array, found '3'");
}

TEST(Json, DepthLimit) {
  const auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_EQ(error_of(nested(128)), "");
  EXPECT_NE(error_of(nested(129)).find("nested deeper than 128"), std::string::npos);
  EXPECT_NE(error_of("[{\"a\":[1]}]", {.max_depth = 2}).find("nested deeper than 2"),
            std::string::npos);
  EXPECT_EQ(error_of("[{\"a\":1}]", {.max_depth = 2}), "");
  // Far beyond any stack: refused at the limit, not a crash.
  EXPECT_NE(error_of(std::string(1'000'000, '[')).find("nested deeper"), std::string::npos);
}

}  // namespace
}  // namespace dc
