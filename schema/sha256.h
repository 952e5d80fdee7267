// SHA-256 (FIPS 180-4), for the content hash of model files in the tuning DB: a model is
// identified by what it contains, not by its path. Small and dependency-free; checked
// against the NIST test vectors in tests/unit/test_tuning_db.cpp.
#pragma once

#include <string>
#include <string_view>

namespace dc {

// 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);
// Of a file's bytes, read in chunks; UserError if it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace dc
