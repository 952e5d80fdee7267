// libFuzzer harness: `dc-db import FILE`: an arbitrary file merged as another tuning DB into
// a fresh one (merge_tuning_db, what cmd_import runs).
#include <cstdint>

#include "fuzz_util.h"
#include "merge.h"
#include "migrate.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dc::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string from = dc::fuzz::scratch_file("other.db", data, size);
  dc::fuzz::expect_user_errors([&] {
    dc::sqlite::Connection into = dc::open_tuning_connection(":memory:", /*read_only=*/false);
    (void)dc::merge_tuning_db(into, from);
  });
  return 0;
}
