// The generic core instantiated with a small finite-field domain, the way the verifier will use
// it: values are pairs (x mod p, x mod q) with q | p - 1, exp maps the Z_q part through a
// generator of order q (a homomorphism Z_q -> Z_p*), max selects under a hash order, other
// non-polynomial ops are pseudo-random functions. In this domain tiled and online forms are
// *exactly* equal to the spec forms, which pins the block walker's traversal (any wrong tile,
// offset, iteration order or accumulator step would change the residues).
#include <gtest/gtest.h>

#include <cmath>

#include "block_graphs.h"
#include "kiln/interp/eval_core.h"

namespace kiln {
namespace {

struct ToyField {
  static constexpr uint64_t P = 2147483647;  // 2^31 - 1
  static constexpr uint64_t Q = 331;         // prime, divides P - 1
  struct V {
    uint64_t p = 0, q = 0;
    bool operator==(const V&) const = default;
  };

  static uint64_t pow_mod(uint64_t b, uint64_t e, uint64_t m) {
    uint64_t r = 1;
    for (b %= m; e; e >>= 1, b = b * b % m)
      if (e & 1) r = r * b % m;
    return r;
  }
  static uint64_t inv(uint64_t x, uint64_t m) { return pow_mod(x, m - 2, m); }
  static uint64_t gen() { return pow_mod(7, (P - 1) / Q, P); }  // 7 is a primitive root of P
  static uint64_t hash(uint64_t a, uint64_t b, uint64_t salt) {
    uint64_t z = a * 0x9e3779b97f4a7c15ull ^ (b + salt) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
    return z ^ (z >> 29);
  }

  // A dyadic double m * 2^e maps to m * (2^-1)^(-e) in each field.
  static V from_double(double x) {
    int e = 0;
    double f = std::frexp(std::fabs(x), &e);
    auto m = static_cast<uint64_t>(std::ldexp(f, 53));
    e -= 53;
    auto one = [&](uint64_t mod) {
      uint64_t v = m % mod;
      uint64_t s = e >= 0 ? pow_mod(2, e, mod) : pow_mod(inv(2, mod), -e, mod);
      v = v * s % mod;
      return x < 0 ? (mod - v) % mod : v;
    };
    return {one(P), one(Q)};
  }
  static V binary(OpKind k, V a, V b) {
    switch (k) {
      case OpKind::Add:
        return {(a.p + b.p) % P, (a.q + b.q) % Q};
      case OpKind::Sub:
        return {(a.p + P - b.p) % P, (a.q + Q - b.q) % Q};
      case OpKind::Mul:
        return {a.p * b.p % P, a.q * b.q % Q};
      case OpKind::Div:
        return {a.p * inv(b.p, P) % P, a.q * inv(b.q, Q) % Q};
      default:
        return max(a, b);
    }
  }
  static V max(V a, V b) {
    uint64_t ha = hash(a.p, a.q, 1), hb = hash(b.p, b.q, 1);
    return ha > hb || (ha == hb && (a.p > b.p || (a.p == b.p && a.q >= b.q))) ? a : b;
  }
  static V unary(OpKind k, const Attrs&, V x) {
    switch (k) {
      case OpKind::Neg:
        return binary(OpKind::Sub, {0, 0}, x);
      case OpKind::Square:
        return binary(OpKind::Mul, x, x);
      case OpKind::Reciprocal:
        return binary(OpKind::Div, from_double(1), x);
      case OpKind::Exp:
        return {pow_mod(gen(), x.q, P), hash(x.p, x.q, 2) % Q};
      default: {
        uint64_t h = hash(x.p, x.q, 100 + static_cast<uint64_t>(k));
        return {h % P, (h >> 32) % Q};
      }
    }
  }
  static V round_store(V x, DType) { return x; }
};
static_assert(interp::ValueDomain<ToyField>);

using T = interp::Tensor<ToyField::V>;

std::vector<T> field_inputs(const KernelGraph& g, uint64_t seed) {
  std::vector<T> in;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    T t(g.tensor(g.inputs[i]).shape);
    for (int64_t e = 0; e < t.size(); ++e) {
      uint64_t h = ToyField::hash(seed * 1000 + i, e, 3);
      t.data[e] = {h % ToyField::P, (h >> 33) % ToyField::Q};
    }
    in.push_back(std::move(t));
  }
  return in;
}

// `p_only`: compare the Z_p parts only (exp's Z_q part is not a homomorphism, so graphs that
// rely on exp(a)exp(b) = exp(a+b) agree on the Z_p part alone).
void expect_field_equal(const testing::GraphPair& pair, bool p_only) {
  ToyField d;
  for (uint64_t seed : {1, 2}) {
    auto got = interp::evaluate_graph(d, pair.mugraph, field_inputs(pair.mugraph, seed));
    auto want = interp::evaluate_graph(d, pair.spec, field_inputs(pair.spec, seed));
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      ASSERT_EQ(got[o].shape, want[o].shape);
      for (int64_t i = 0; i < got[o].size(); ++i) {
        ASSERT_EQ(got[o].data[i].p, want[o].data[i].p) << "output " << o << " element " << i;
        if (!p_only) {
          ASSERT_EQ(got[o].data[i].q, want[o].data[i].q) << "element " << i;
        }
      }
    }
  }
}

TEST(FieldDomain, TiledAndSplitKMatmulAreExact) {
  expect_field_equal(testing::tiled_matmul(32, 64, 48, 2, 3, 4), false);
  expect_field_equal(testing::split_k_matmul(16, 64, 48, 3, 2, 4), false);
}

TEST(FieldDomain, OnlineSoftmaxIsExactThanksToTheExpHomomorphism) {
  expect_field_equal(testing::online_softmax(8, 64, 2, 4), true);
  expect_field_equal(testing::online_softmax(4, 96, 1, 6), true);
}

TEST(FieldDomain, FlashAttentionIsExact) {
  expect_field_equal(testing::flash_attention(2, 16, 8, 64, 4), true);
}

TEST(FieldDomain, FusedGatedMlpIsExact) {
  expect_field_equal(testing::gated_mlp(16, 64, 32, 2, 2, 4), false);
}

TEST(FieldDomain, OnlineSoftmaxWithoutRescaleIsCaught) {
  // Summing the local normalizers without rescaling them to the global max is wrong whenever
  // the loop has more than one iteration; the field domain must see it.
  testing::GraphPair p = testing::online_softmax(8, 64, 2, 4, DType::F32, /*rescale=*/false);
  ToyField d;
  auto got = interp::evaluate_graph(d, p.mugraph, field_inputs(p.mugraph, 1));
  auto want = interp::evaluate_graph(d, p.spec, field_inputs(p.spec, 1));
  int64_t diff = 0;
  for (int64_t i = 0; i < want[0].size(); ++i) diff += got[0].data[i].p != want[0].data[i].p;
  EXPECT_GT(diff, want[0].size() / 2);
}

}  // namespace
}  // namespace kiln
