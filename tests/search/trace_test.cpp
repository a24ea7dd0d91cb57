// Traces: every event's parent exists, the file reads back as written, and the reports work.
#include "kiln/search/trace.h"

#include <map>

#include <gtest/gtest.h>

#include "kiln/search/search.h"
#include "search_test_util.h"

namespace kiln::search {
namespace {

TEST(Trace, RoundTripAndTree) {
  std::string path = std::string(KILN_BINARY_DIR) + "/test_search_trace.jsonl";
  SearchConfig c;
  c.threads = 2;
  c.top_k = 2;
  c.use_z3 = false;
  c.variants.max_split = 4;
  SearchResult r;
  {
    TraceWriter w(path);
    r = run_search(testing::small_gated_mlp(), c, &w);
  }
  std::vector<TraceEvent> es = read_trace(path);
  ASSERT_FALSE(es.empty());
  std::map<int64_t, const TraceEvent*> first;
  for (const TraceEvent& e : es) first.emplace(e.id, &e);
  int64_t expanded = 0, verified = 0;
  for (const TraceEvent& e : es) {
    if (e.parent >= 0) {
      EXPECT_TRUE(first.count(e.parent)) << "orphan " << e.id;
    }
    expanded += e.event == "expanded";
    verified += e.event == "verified";
  }
  EXPECT_EQ(es.front().kind, "root");
  EXPECT_EQ(expanded, r.stats.states);
  EXPECT_EQ(verified, r.stats.verified);
  // The winner's path leads back to the root through its variant and partition.
  std::string why = trace_why(es, r.best().state);
  EXPECT_NE(why.find("root"), std::string::npos);
  EXPECT_NE(why.find("partition"), std::string::npos);
  EXPECT_NE(trace_summary(es).find("verified"), std::string::npos);
  EXPECT_NE(trace_top(es, 3).find("1."), std::string::npos);
  EXPECT_NE(trace_tree(es, 1).find("variant"), std::string::npos);
  // Event JSON round trip.
  TraceEvent e = es.back();
  TraceEvent back = TraceEvent::from_json(e.to_json());
  EXPECT_EQ(back.id, e.id);
  EXPECT_EQ(back.parent, e.parent);
  EXPECT_EQ(back.detail, e.detail);
}

}  // namespace
}  // namespace kiln::search
