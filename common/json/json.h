// A small strict JSON reader (RFC 8259) for the files dc reads back at run time, plan.json
// above all. Why our own: libdcrt is deployed into applications and must not drag in
// yaml-cpp (which the runtime used to read plan.json as YAML), and the allowed dependencies
// (/work/shared/DESIGN.md) have no JSON library. The writer side is ir/json_writer.h.
//
// Strict means: exactly the RFC grammar (no comments, no trailing commas, no NaN/Infinity,
// no leading '+' or zeros), UTF-8 text with no byte-order mark, strings without raw control
// characters, \u escapes with surrogates only in valid pairs, numbers that fit a double,
// one value and nothing but whitespace after it. Beyond the RFC: a key given twice in one
// object is an error (RFC 8259 leaves its meaning open), and nesting is limited
// (ParseLimits::max_depth) so that a hostile file cannot overflow the stack.
// Every error is a UserError "ORIGIN:LINE:COLUMN: not valid JSON: what" (column in bytes, from 1); nothing
// else escapes (bad_alloc aside).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dc::json {

enum class Type { null, boolean, number, string, array, object };
const char* type_name(Type t);  // "null", "a boolean", "a number", ...

struct Member;

struct Value {
  Type type = Type::null;
  bool boolean = false;
  double number = 0;       // the number's value (-0 stays -0)
  std::string text;        // a string's decoded UTF-8; a number's literal as written
  std::vector<Value> items;                            // an array's elements
  std::vector<Member> members;  // an object's, in document order
  int line = 0;            // where the value starts, from 1
  int column = 0;

  // The member named `key` of an object, or nullptr (also for a non-object).
  const Value* find(std::string_view key) const;
  // A number literal without fraction or exponent ("-0", "42"): true and *out set when it
  // fits int64_t; false otherwise (then 1e3, 1.0 and 2^63 are not integers).
  bool integer(int64_t* out) const;
};

// A member of an object (a struct, not std::pair: a pair of an incomplete Value cannot be
// declared inside Value: clang with libstdc++ 12 refuses it, and the fuzz build is clang).
struct Member {
  std::string key;
  Value value;
};

struct ParseLimits {
  int max_depth = 128;  // arrays and objects open at once
};

// Parses one JSON text. `origin` names it in messages (a path).
Value parse(std::string_view text, const std::string& origin, const ParseLimits& limits = {});

}  // namespace dc::json
