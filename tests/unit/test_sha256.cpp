// The SHA-256 that identifies model files in the tuning DB (NIST vectors, padding edges, files).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "ir/error.h"
#include "sha256.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklm"
                       "nopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1'000'000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundariesAndFiles) {
  // Expected values from Python's hashlib over bytes (i * 7 + 3) % 256.
  const std::pair<size_t, const char*> cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
  };
  testing::TempDir dir;
  for (const auto& [n, hex] : cases) {
    std::string data;
    for (size_t i = 0; i < n; ++i) data += static_cast<char>((i * 7 + 3) % 256);
    EXPECT_EQ(sha256_hex(data), hex) << n << " bytes";
    const std::string path = dir.file("f" + std::to_string(n));
    std::ofstream(path, std::ios::binary) << data;
    EXPECT_EQ(sha256_file_hex(path), hex) << n << " bytes from a file";
  }
  EXPECT_THROW(sha256_file_hex(dir.file("missing")), UserError);
}

}  // namespace
}  // namespace dc
