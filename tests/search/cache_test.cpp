// The result cache: keyed by spec, config and version; a second lookup is a hit.
#include "kiln/search/cache.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "search_test_util.h"

namespace kiln::search {
namespace {

TEST(Cache, SecondRunIsAHit) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_search";
  std::filesystem::remove_all(dir);
  KernelGraph spec = testing::small_matmul();
  SearchConfig c;
  c.threads = 2;
  c.top_k = 2;
  c.use_z3 = false;
  std::string key = cache_key(spec, c);
  EXPECT_FALSE(cache_load(dir, key).has_value());
  SearchResult r = run_search(spec, c);
  cache_store(dir, key, r);
  std::optional<SearchResult> hit = cache_load(dir, key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(hit->from_cache);
  EXPECT_EQ(hit->best().fingerprint, r.best().fingerprint);
  EXPECT_EQ(hit->stop, r.stop);
  EXPECT_EQ(hit->stats.states, r.stats.states);
}

TEST(Cache, KeyDependsOnSpecAndConfigButNotThreads) {
  SearchConfig c;
  std::string k = cache_key(testing::small_matmul(), c);
  EXPECT_EQ(k.size(), 16u);
  SearchConfig t = c;
  t.threads = 7;
  EXPECT_EQ(cache_key(testing::small_matmul(), t), k);
  SearchConfig a = c;
  a.arch = Arch::Sm80;
  EXPECT_NE(cache_key(testing::small_matmul(), a), k);
  EXPECT_NE(cache_key(testing::small_gated_mlp(), c), k);
}

TEST(Cache, DamagedEntryIsIgnored) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_damaged";
  std::filesystem::create_directories(dir);
  FILE* f = std::fopen((dir + "/0123456789abcdef.json").c_str(), "w");
  std::fputs("{not json", f);
  std::fclose(f);
  EXPECT_FALSE(cache_load(dir, "0123456789abcdef").has_value());
}

}  // namespace
}  // namespace kiln::search

namespace kiln::search {
namespace {

// Issue 21: the cache cannot lie. A cached result is checked again before use: an edited entry
// (a graph that no longer computes the spec) and an entry of another spec both fail the recheck;
// an untouched entry passes it.
TEST(Cache, EntriesAreCheckedAgainBeforeUse) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_recheck";
  std::filesystem::remove_all(dir);
  KernelGraph spec = testing::small_gated_mlp();
  SearchConfig c;
  c.threads = 2;
  c.top_k = 2;
  c.use_z3 = false;
  c.time_limit_s = 20;
  std::string key = cache_key(spec, c);
  SearchResult r = run_search(spec, c);
  ASSERT_FALSE(r.ranked.empty());
  cache_store(dir, key, r);
  std::optional<SearchResult> hit = cache_load(dir, key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(recheck_cached(spec, *hit, c), 0);
  // Tamper with the stored winner: every silu becomes a sigmoid (or exp a neg).
  std::string path = dir + "/" + key + ".json";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  in.close();
  std::string edited = text;
  bool changed = false;
  for (auto [from, to] :
       {std::pair<std::string, std::string>{"\"silu\"", "\"sigmoid\""}, {"\"exp\"", "\"neg\""}})
    for (size_t p = edited.find(from); p != std::string::npos; p = edited.find(from, p + 1)) {
      edited.replace(p, from.size(), to);
      changed = true;
    }
  ASSERT_TRUE(changed) << "no op to tamper with in the cached entry";
  std::ofstream(path) << edited;
  std::optional<SearchResult> bad = cache_load(dir, key);
  ASSERT_TRUE(bad.has_value());
  EXPECT_GT(recheck_cached(spec, *bad, c), 0);
  // An entry of another spec under this key.
  std::ofstream(path) << text;
  std::optional<SearchResult> other = cache_load(dir, key);
  ASSERT_TRUE(other.has_value());
  EXPECT_GT(recheck_cached(testing::small_matmul(), *other, c), 0);
}

}  // namespace
}  // namespace kiln::search
