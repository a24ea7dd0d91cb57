// The result cache: keyed by spec, config and version; a second lookup is a hit.
#include "kiln/search/cache.h"

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <gtest/gtest.h>

#include "search_test_util.h"

namespace kiln::search {
namespace {

// A quick search: two threads, the pruner's fast path only, the top `top_k`.
SearchConfig quick_config(int top_k = 2) {
  SearchConfig c;
  c.threads = 2;
  c.top_k = top_k;
  c.use_z3 = false;
  return c;
}

TEST(Cache, SecondRunIsAHit) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_search";
  std::filesystem::remove_all(dir);
  KernelGraph spec = testing::small_matmul();
  SearchConfig c = quick_config(2);
  std::string key = cache_key(spec, c);
  EXPECT_EQ(cache_load(dir, key).status, CacheStatus::Missing);
  SearchResult r = run_search(spec, c);
  EXPECT_TRUE(cache_store(dir, key, r));
  CacheLookup l = cache_load(dir, key);
  EXPECT_EQ(l.status, CacheStatus::Hit);
  std::optional<SearchResult>& hit = l.result;
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

// Issue 21: a damaged entry is reported as such (with the parser's reason), not as a miss, and
// the next store replaces it.
TEST(Cache, DamagedEntryIsReportedAndReplaced) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_damaged";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  FILE* f = std::fopen((dir + "/0123456789abcdef.json").c_str(), "w");
  std::fputs("{not json", f);
  std::fclose(f);
  CacheLookup l = cache_load(dir, "0123456789abcdef");
  EXPECT_EQ(l.status, CacheStatus::Damaged);
  EXPECT_FALSE(l.result.has_value());
  EXPECT_FALSE(l.why.empty());
  EXPECT_EQ(l.path, dir + "/0123456789abcdef.json");
  SearchConfig c = quick_config(1);
  SearchResult r = run_search(testing::small_matmul(), c);
  EXPECT_TRUE(cache_store(dir, "0123456789abcdef", r));
  EXPECT_EQ(cache_load(dir, "0123456789abcdef").status, CacheStatus::Hit);
}

// Issue 21: a FIFO at an entry's path hung the run forever (the open waited for a writer). A
// special file is reported without being opened, and never replaced; so is a directory.
TEST(Cache, SpecialFilesAreNotOpenedNorReplaced) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_special";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/bbbbbbbbbbbbbbbb.json");
  ASSERT_EQ(::mkfifo((dir + "/aaaaaaaaaaaaaaaa.json").c_str(), 0600), 0);
  CacheLookup fifo = cache_load(dir, "aaaaaaaaaaaaaaaa");  // returns at once
  EXPECT_EQ(fifo.status, CacheStatus::NotRegular);
  EXPECT_NE(fifo.why.find("FIFO"), std::string::npos) << fifo.why;
  CacheLookup d = cache_load(dir, "bbbbbbbbbbbbbbbb");
  EXPECT_EQ(d.status, CacheStatus::NotRegular);
  EXPECT_NE(d.why.find("directory"), std::string::npos) << d.why;
  SearchConfig c = quick_config(1);
  SearchResult r = run_search(testing::small_matmul(), c);
  EXPECT_FALSE(cache_store(dir, "aaaaaaaaaaaaaaaa", r));
  EXPECT_FALSE(cache_store(dir, "bbbbbbbbbbbbbbbb", r));
  struct stat st;
  ASSERT_EQ(::lstat((dir + "/aaaaaaaaaaaaaaaa.json").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/bbbbbbbbbbbbbbbb.json"));
}

// Issue 21: an entry's lock makes a second holder wait (it is told once) until the first lets
// go; a lock file that is a FIFO is refused at once instead of hanging.
TEST(Cache, EntryLockMakesTheSecondRunWait) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_lock";
  std::filesystem::remove_all(dir);
  FileLock first = lock_cache_entry(dir, "cccccccccccccccc");
  ASSERT_TRUE(first.held()) << first.error();
  std::atomic<int> waits{0};
  std::atomic<bool> second_held{false};
  std::thread t([&] {
    FileLock second = lock_cache_entry(dir, "cccccccccccccccc", [&] { ++waits; });
    second_held = second.held();
  });
  for (int i = 0; i < 500 && waits == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(waits, 1);
  EXPECT_FALSE(second_held);
  first.release();
  t.join();
  EXPECT_TRUE(second_held);
  EXPECT_EQ(waits, 1);
  ASSERT_EQ(::mkfifo((dir + "/dddddddddddddddd.lock").c_str(), 0600), 0);
  FileLock fifo = lock_cache_entry(dir, "dddddddddddddddd");
  EXPECT_FALSE(fifo.held());
  EXPECT_NE(fifo.error().find("FIFO"), std::string::npos) << fifo.error();
}

// Issue 21: the cache cannot lie. A cached result is checked again before use: an edited entry
// (a graph that no longer computes the spec) and an entry of another spec both fail the recheck;
// an untouched entry passes it.
TEST(Cache, EntriesAreCheckedAgainBeforeUse) {
  std::string dir = std::string(KILN_BINARY_DIR) + "/test_cache_recheck";
  std::filesystem::remove_all(dir);
  KernelGraph spec = testing::small_gated_mlp();
  SearchConfig c = quick_config(2);
  c.time_limit_s = 20;
  std::string key = cache_key(spec, c);
  SearchResult r = run_search(spec, c);
  ASSERT_FALSE(r.ranked.empty());
  cache_store(dir, key, r);
  std::optional<SearchResult> hit = cache_load(dir, key).result;
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
  std::optional<SearchResult> bad = cache_load(dir, key).result;
  ASSERT_TRUE(bad.has_value());
  EXPECT_GT(recheck_cached(spec, *bad, c), 0);
  // An entry of another spec under this key.
  std::ofstream(path) << text;
  std::optional<SearchResult> other = cache_load(dir, key).result;
  ASSERT_TRUE(other.has_value());
  EXPECT_GT(recheck_cached(testing::small_matmul(), *other, c), 0);
}

}  // namespace
}  // namespace kiln::search
