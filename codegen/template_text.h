// CUDA text with named holes, for the GEMM-family, depthwise and attention templates:
// `$(NAME)` is replaced by vars[NAME]. A hole alone on its line is a block: the value's
// lines (their common indentation removed) take the hole's indentation, and an empty block
// removes the line. So templates keep CUDA's braces readable (no fmt escaping) and nested
// generated code comes out indented as it nests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/error.h"

namespace dc {

using TemplateVars = std::map<std::string, std::string>;

namespace template_text_detail {

// Lines of `text` without their common leading spaces and without trailing blank lines.
inline std::vector<std::string> normalized_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t b = 0;
  while (b <= text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    lines.push_back(text.substr(b, e - b));
    b = e + 1;
  }
  while (!lines.empty() && lines.back().find_first_not_of(' ') == std::string::npos) lines.pop_back();
  size_t common = std::string::npos;
  for (const auto& l : lines) {
    const size_t lead = l.find_first_not_of(' ');
    if (lead != std::string::npos && lead < common) common = lead;
  }
  for (auto& l : lines) l = l.find_first_not_of(' ') == std::string::npos ? "" : l.substr(common);
  return lines;
}

}  // namespace template_text_detail

// `code` without its common indentation (for statements other emitters indent their own way).
inline std::string dedent(const std::string& code) {
  std::string out;
  for (const auto& l : template_text_detail::normalized_lines(code)) out += l + "\n";
  return out;
}

inline std::string expand_template(const std::string& text, const TemplateVars& vars) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t p = text.find("$(", i);
    if (p == std::string::npos) {
      out += text.substr(i);
      break;
    }
    out += text.substr(i, p - i);
    const size_t e = text.find(')', p);
    DC_INTERNAL_CHECK(e != std::string::npos, "unterminated $( in a kernel template");
    const std::string name = text.substr(p + 2, e - p - 2);
    const auto it = vars.find(name);
    DC_INTERNAL_CHECK(it != vars.end(), "kernel template hole $(", name, ") has no value");
    i = e + 1;
    const size_t line_start = out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1;
    const bool alone = out.find_first_not_of(' ', line_start) == std::string::npos &&
                       (i == text.size() || text[i] == '\n');
    if (!alone) {
      out += it->second;
      continue;
    }
    const std::string indent = out.substr(line_start);
    const auto lines = template_text_detail::normalized_lines(it->second);
    if (lines.empty()) {
      out.resize(line_start);  // an empty block leaves no blank line
      if (i < text.size()) ++i;
      continue;
    }
    for (size_t l = 0; l < lines.size(); ++l) {
      if (l > 0) out += lines[l].empty() ? "\n" : "\n" + indent;
      out += lines[l];
    }
  }
  return out;
}

// Macros the templates use; guarded so that a prelude defining them wins.
// DC_UNROLL_K: the K loop around a register tile whose own loops unroll in full; in full on
// CUDA too, by 4 in the OpenCL dialect (opencl_dialect.cpp says why).
inline const char* template_macros() {
  return R"(#ifndef DC_UNROLL
#ifdef DC_HOST_EMULATION
#define DC_UNROLL
#else
#define DC_UNROLL _Pragma("unroll")
#endif
#endif
#ifndef DC_UNROLL_K
#ifdef DC_HOST_EMULATION
#define DC_UNROLL_K
#else
#define DC_UNROLL_K _Pragma("unroll")
#endif
#endif
#ifndef DC_LAUNCH_BOUNDS
#ifdef DC_HOST_EMULATION
#define DC_LAUNCH_BOUNDS(n)
#else
#define DC_LAUNCH_BOUNDS(n) __launch_bounds__(n)
#endif
#endif
)";
}

}  // namespace dc
