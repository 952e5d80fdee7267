// libFuzzer harness: `dc-db import FILE`: an arbitrary file merged as another tuning DB into
// a fresh one (merge_tuning_db, what cmd_import runs).
//
// Speed: a fresh tuning DB runs every migration (most of an input's time when done per
// input). The harness migrates one in-memory DB once per process, keeps its image
// (sqlite3_serialize), and gives each input a new connection holding a copy of that image
// (sqlite3_deserialize): the same schema, version and application id as
// open_tuning_connection(":memory:") gives, so an input costs the merge only.
#include <sqlite3.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_util.h"
#include "merge.h"
#include "migrate.h"

namespace {

// The bytes of an in-memory tuning DB after every migration.
const std::vector<unsigned char>& migrated_image() {
  static const std::vector<unsigned char> image = [] {
    dc::sqlite::Connection db = dc::open_tuning_connection(":memory:", /*read_only=*/false);
    sqlite3_int64 n = 0;
    unsigned char* bytes = sqlite3_serialize(db.handle(), "main", &n, 0);
    if (bytes == nullptr || n <= 0) {
      std::fprintf(stderr, "fuzz: cannot serialize the migrated DB\n");
      std::abort();
    }
    std::vector<unsigned char> copy(bytes, bytes + n);
    sqlite3_free(bytes);
    return copy;
  }();
  return image;
}

// A fresh connection (foreign keys on, as every dc connection) on a copy of the image.
dc::sqlite::Connection migrated_copy() {
  const std::vector<unsigned char>& image = migrated_image();
  dc::sqlite::Connection db(":memory:", /*read_only=*/false);
  auto* bytes = static_cast<unsigned char*>(sqlite3_malloc64(image.size()));
  if (bytes == nullptr) throw std::bad_alloc();
  std::memcpy(bytes, image.data(), image.size());
  const auto n = static_cast<sqlite3_int64>(image.size());
  // FREEONCLOSE: SQLite owns (and frees) the copy; RESIZEABLE: the merge may grow it.
  const int rc = sqlite3_deserialize(db.handle(), "main", bytes, n, n,
                                     SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE);
  if (rc != SQLITE_OK) {
    std::fprintf(stderr, "fuzz: cannot deserialize the migrated DB: %s\n", sqlite3_errstr(rc));
    std::abort();
  }
  return db;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dc::fuzz::quiet_logs();
  // The image must be what a fresh DB is: current schema version, dc's application id.
  dc::sqlite::Connection probe = migrated_copy();
  if (probe.scalar_int("PRAGMA user_version") != dc::schema_version() ||
      probe.scalar_int("PRAGMA application_id") != dc::kTuningDbApplicationId ||
      probe.scalar_int("PRAGMA foreign_keys") != 1) {
    std::fprintf(stderr, "fuzz: the migrated image is not a current tuning DB\n");
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string from = dc::fuzz::scratch_file("other.db", data, size);
  dc::fuzz::expect_user_errors([&] {
    dc::sqlite::Connection into = migrated_copy();
    (void)dc::merge_tuning_db(into, from);
  });
  return 0;
}
