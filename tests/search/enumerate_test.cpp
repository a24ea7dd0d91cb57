// The op-by-op block-graph enumerator: finds the expected graph, generates no duplicates, prunes
// a wrong op by its abstract expression, is deterministic, and feeds the search.
#include "kiln/search/enumerate.h"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "kiln/ir/json_io.h"
#include "kiln/search/prune.h"
#include "kiln/search/search.h"
#include "kiln/verifier/verify.h"
#include "search_test_util.h"

namespace kiln::search {
namespace {

KernelGraph matmul_relu() {
  return parse_spec(R"({
    "name": "mr", "inputs": [
      {"name": "X", "shape": [4, 64], "dtype": "f16"},
      {"name": "W", "shape": [64, 16], "dtype": "f16"}],
    "nodes": [
      {"name": "M", "op": "matmul", "inputs": ["X", "W"]},
      {"name": "O", "op": "relu", "inputs": ["M"]}],
    "outputs": ["O"]})");
}

// Abstract expressions of the primitive graph's nodes (inputs by name).
std::vector<AbsExpr> exprs_of(const PGraph& g) {
  std::vector<AbsExpr> e(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const PNode& x = g.nodes[n];
    if (x.kind == OpKind::Input) {
      e[n] = AbsExpr::input(x.name);
      continue;
    }
    std::vector<AbsExpr> a;
    std::vector<Shape> s;
    for (int i : x.inputs) a.push_back(e[i]), s.push_back(g.nodes[i].shape);
    e[n] = abstract_op(x.kind, x.attrs, a, s);
  }
  return e;
}

struct Fixture {
  KernelGraph spec = matmul_relu();
  PGraph g = expand_spec(spec);
  std::vector<int> group = canonical_order(g);
  std::vector<AbsExpr> exprs = exprs_of(g);
  Pruner pruner = Pruner::for_spec(spec);
  Schedule looped() const {
    Schedule s;
    s.loop_label = g.labels[g.inputs[0]][1];  // K
    s.loop_range = 4;
    return s;
  }
};

std::string ops_str(const BlockRecipe& r) {
  std::string s;
  for (const auto& o : r.ops) s += std::string(op_name(o.op.kind)) + " ";
  return s;
}

TEST(Enumerate, FindsMatmulReluWithAndWithoutALoop) {
  Fixture f;
  EnumResult one =
      enumerate_block_graphs(f.g, f.group, Schedule{}, f.exprs, &f.pruner, default_target(), {});
  ASSERT_FALSE(one.recipes.empty());
  EXPECT_EQ(ops_str(one.recipes.front()), "matmul relu ");
  EnumResult loop =
      enumerate_block_graphs(f.g, f.group, f.looped(), f.exprs, &f.pruner, default_target(), {});
  ASSERT_FALSE(loop.recipes.empty());
  EXPECT_EQ(ops_str(loop.recipes.front()), "matmul accum_sum relu ");
  // Instantiated, fused and assembled, the kernel is equivalent to the spec.
  Lowered l = instantiate(f.g, f.group, f.looped(), loop.recipes.front(), default_target(), 64);
  ASSERT_TRUE(l.block != nullptr) << l.message;
  KernelGraph k = assemble(f.g, {{f.group, l.block}}, Arch::Sm90a);
  EXPECT_TRUE(verifier::verify(f.spec, k, {}).equivalent());
}

TEST(Enumerate, GeneratesNoDuplicates) {
  Fixture f;
  EnumOptions o;
  o.max_results = 1000;
  o.max_ops = 5;
  // A spec whose vocabulary allows several orders: relu(X·W) + X·W.
  KernelGraph spec = parse_spec(R"({
    "name": "mra", "inputs": [
      {"name": "X", "shape": [4, 64], "dtype": "f16"},
      {"name": "W", "shape": [64, 16], "dtype": "f16"}],
    "nodes": [
      {"name": "M", "op": "matmul", "inputs": ["X", "W"]},
      {"name": "R", "op": "relu", "inputs": ["M"]},
      {"name": "O", "op": "add", "inputs": ["R", "M"]}],
    "outputs": ["O"]})");
  PGraph g = expand_spec(spec);
  Pruner p = Pruner::for_spec(spec);
  Schedule s;
  s.loop_label = g.labels[g.inputs[0]][1];
  s.loop_range = 2;
  EnumResult r =
      enumerate_block_graphs(g, canonical_order(g), s, exprs_of(g), &p, default_target(), o);
  EXPECT_FALSE(r.budget_hit);
  std::set<std::string> recipes, graphs;
  int n = 0;
  for (const BlockRecipe& rc : r.recipes) {
    EXPECT_TRUE(recipes.insert(rc.str()).second) << "recipe twice: " << rc.str();
    Lowered l = instantiate(g, canonical_order(g), s, rc, default_target(), 64);
    ASSERT_TRUE(l.block != nullptr) << l.message;
    KernelGraph k = assemble(g, {{canonical_order(g), l.block}}, Arch::Sm90a);
    EXPECT_TRUE(graphs.insert(fingerprint(k)).second) << "graph twice: " << rc.str();
    ++n;
  }
  EXPECT_GE(n, 1);
  // The canonical order and the CSE rule both cut extensions.
  EXPECT_GT(r.out_of_order, 0);
  EXPECT_GT(r.cse, 0);
}

TEST(Enumerate, PrunesAnOpTheSpecCannotContainByItsAbstractExpression) {
  Fixture f;
  EnumOptions o;
  o.extra = {VocabOp{OpKind::Exp, {}}};
  EnumResult r =
      enumerate_block_graphs(f.g, f.group, Schedule{}, f.exprs, &f.pruner, default_target(), o);
  int exp_pruned = 0, exp_kept = 0;
  for (const EnumState& s : r.states_log)
    if (s.detail(r.vocab).rfind("exp(", 0) == 0) (s.pruned == "absexpr" ? exp_pruned : exp_kept)++;
  EXPECT_GT(exp_pruned, 0);
  EXPECT_EQ(exp_kept, 0);  // exp(X), exp(W), exp(X·W): none is in relu(X·W)
  EXPECT_GT(r.pruned.at("absexpr"), 0);
  for (const BlockRecipe& rc : r.recipes) EXPECT_EQ(ops_str(rc).find("exp"), std::string::npos);
  // Without abstract-expression pruning exp states survive (and are extended).
  o.group_roots = false;
  EnumResult u =
      enumerate_block_graphs(f.g, f.group, Schedule{}, f.exprs, nullptr, default_target(), o);
  int survived = 0;
  for (const EnumState& s : u.states_log)
    if (s.detail(u.vocab).rfind("exp(", 0) == 0 && s.pruned.empty()) ++survived;
  EXPECT_GT(survived, 0);
  EXPECT_GT(u.states, r.states);
}

TEST(Enumerate, IsDeterministic) {
  Fixture f;
  auto run = [&] {
    Pruner p = Pruner::for_spec(f.spec);
    return enumerate_block_graphs(f.g, f.group, f.looped(), f.exprs, &p, default_target(), {});
  };
  EnumResult a = run(), b = run();
  EXPECT_EQ(a.states, b.states);
  EXPECT_EQ(a.pruned, b.pruned);
  ASSERT_EQ(a.recipes.size(), b.recipes.size());
  for (size_t i = 0; i < a.recipes.size(); ++i) EXPECT_EQ(a.recipes[i].str(), b.recipes[i].str());
  ASSERT_EQ(a.states_log.size(), b.states_log.size());
  for (size_t i = 0; i < a.states_log.size(); ++i)
    EXPECT_EQ(a.states_log[i].detail(a.vocab), b.states_log[i].detail(b.vocab));
}

TEST(Enumerate, FeedsTheSearch) {
  SearchConfig c;
  c.threads = 2;
  c.top_k = 2;
  c.use_z3 = false;
  c.variants.max_split = 4;
  c.schedules.block_threads = {128};
  SearchResult r = run_search(matmul_relu(), c);
  EXPECT_GT(r.stats.enum_states, 0);
  EXPECT_GT(r.stats.enum_recipes, 0);
  EXPECT_GT(r.stats.pruned["enum_absexpr"], 0);
  EXPECT_TRUE(r.best().verified);
  c.enumerate = false;
  SearchResult off = run_search(matmul_relu(), c);
  EXPECT_EQ(off.stats.enum_states, 0);
  EXPECT_LE(r.best().cost.time, off.best().cost.time);  // enumeration never makes it worse
}

// One tensor in two roles (X X^T, one iterator for X): abstract expressions have no dims, so they
// cannot tell in_X * in_X from in_X * in_X^T; the labels of the tiles' dims can. Looped over K
// (a square [64, 64] tile) the enumerator used to offer in_X * in_X, which only the verifier
// rejected once the search's beam kept it; every recipe it offers now is equivalent to the spec.
TEST(Enumerate, MatmulsContractDimsOfOneLabel) {
  KernelGraph spec = testing::gram();
  PGraph g = expand_spec(spec);
  Pruner p = Pruner::for_spec(spec);
  EnumOptions o;
  o.max_results = 1000;
  Schedule s;
  s.loop_label = g.labels[g.inputs[0]][1];  // K
  s.loop_range = 2;
  EnumResult r =
      enumerate_block_graphs(g, canonical_order(g), s, exprs_of(g), &p, default_target(), o);
  EXPECT_GT(r.pruned["map"], 0);
  for (const BlockRecipe& rc : r.recipes) {
    Lowered l = instantiate(g, canonical_order(g), s, rc, default_target(), 64);
    if (!l.block) continue;
    KernelGraph k = assemble(g, {{canonical_order(g), l.block}}, Arch::Sm90a);
    EXPECT_TRUE(verifier::verify(spec, k, {}).equivalent()) << rc.str();
  }
}

}  // namespace
}  // namespace kiln::search
