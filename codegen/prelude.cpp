#include "prelude.h"

#include "prelude_sections.h"

namespace dc {

const std::string& cuda_prelude() {
  static const std::string text = std::string(prelude_text::kBase) + prelude_text::kHalf +
                                  prelude_text::kCpAsync + prelude_text::kMma + prelude_text::kMma884 +
                                  "// ---- end of prelude ------------------------------------------------------------\n";
  return text;
}

}  // namespace dc
