// libFuzzer harness: a plan directory (plan.json, kernels.cu, weights.bin) through read_plan,
// as dc-run and libdcrt load one. One input packs the three files, separated by kFileSep
// (a missing part is a missing file). Unless the input starts with '!', the harness writes
// the true sizes and FNV-1a sums of kernels.cu and weights.bin into plan.json first, so that
// mutations reach the checks behind the checksums as well as the checksums themselves.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "plan/plan_io.h"
#include "ir/workload.h"

namespace {

constexpr std::string_view kFileSep = "\n@@dc-fuzz-file@@\n";

// Replaces the value after `"key":` inside the object that follows `"file":{`, when found.
void set_field(std::string& json, const std::string& file, const std::string& key, const std::string& value) {
  const size_t obj = json.find("\"" + file + "\":{");
  if (obj == std::string::npos) return;
  const size_t at = json.find("\"" + key + "\":", obj);
  const size_t end_obj = json.find('}', obj);
  if (at == std::string::npos || at > end_obj) return;
  const size_t begin = at + key.size() + 3;
  const size_t end = json.find_first_of(",}", begin);
  if (end == std::string::npos) return;
  json.replace(begin, end - begin, value);
}

void set_sum(std::string& json, const std::string& file, std::string_view text) {
  set_field(json, file, "bytes", std::to_string(text.size()));
  set_field(json, file, "fnv1a", "\"" + dc::fnv1a_hex(std::string(text)) + "\"");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dc::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const bool raw = !input.empty() && input[0] == '!';
  if (raw) input.remove_prefix(1);
  const auto parts = dc::fuzz::split(input, kFileSep);
  // One folder for the process's inputs (made once): each input rewrites its files and
  // removes those it lacks, rather than making the folder anew.
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = dc::fuzz::scratch_dir() / "plan";
    std::filesystem::create_directories(d);
    return d;
  }();
  std::string json(parts[0]);
  if (!raw && parts.size() > 1) set_sum(json, "kernels.cu", parts[1]);
  if (!raw && parts.size() > 2) set_sum(json, "weights.bin", parts[2]);
  dc::fuzz::write_file(dir / "plan.json", json);
  const char* const others[] = {"kernels.cu", "weights.bin"};
  for (size_t i = 0; i < 2; ++i) {
    if (parts.size() > i + 1) dc::fuzz::write_file(dir / others[i], parts[i + 1]);
    else std::filesystem::remove(dir / others[i]);
  }
  dc::fuzz::expect_user_errors([&] { (void)dc::read_plan(dir.string()); });
  return 0;
}
