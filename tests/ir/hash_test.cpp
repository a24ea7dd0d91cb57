// The content hash: XXH3-64 exactly (stored cache keys and fingerprints depend on its values
// being the same everywhere), and well spread over the strings Kiln hashes.
#include "kiln/ir/hash.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>

namespace kiln {
namespace {

TEST(Hash, IsXxh3SixtyFour) {
  // The reference value of XXH3_64bits over no bytes (xxHash's own test vector).
  EXPECT_EQ(hash64(""), 0x2d06800538d394c2ull);
  EXPECT_EQ(hash_hex(""), "2d06800538d394c2");
}

TEST(Hash, HexIsSixteenDigitsAndDistinctOnNearStrings) {
  std::set<std::string> seen;
  for (int i = 0; i < 100000; ++i) {
    // Strings that differ in one character or one attribute value, as fingerprints do.
    std::string s = fmt::format("op{}(0,1)a-1,0,{},{}", i % 37, i, i % 2 ? "1e-05" : "1e-06");
    std::string h = hash_hex(s);
    ASSERT_EQ(h.size(), 16u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_EQ(h, hash_hex(s));  // deterministic
    EXPECT_TRUE(seen.insert(h).second) << s;
  }
}

// A file's hash is the hash of its bytes, however many 1 MB chunks it is read in; a file that
// cannot be read hashes to nothing.
TEST(Hash, FileHashIsTheHashOfItsBytes) {
  std::string bytes;
  for (int i = 0; bytes.size() < (size_t(5) << 19); ++i) bytes += fmt::format("{},", i * 7919);
  const std::string path =
      (std::filesystem::temp_directory_path() / "kiln_hash_file_test.bin").string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(f);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  EXPECT_EQ(hash_file_hex(path), hash_hex(bytes));
  std::filesystem::remove(path);
  EXPECT_EQ(hash_file_hex(path), "");
}

}  // namespace
}  // namespace kiln
