// The finite-field domain: primes, Montgomery arithmetic, the exp homomorphism, exact
// constants, and the algebraic laws the verifier relies on.
#include <gtest/gtest.h>

#include <random>

#include "kiln/verifier/field.h"

namespace kiln::verifier {
namespace {

TEST(PrimePairs, AreLargePrimesWithQDividingPMinusOneAndGOfOrderQ) {
  ASSERT_GE(prime_pairs().size(), 2u);
  for (const PrimePair& pp : prime_pairs()) {
    EXPECT_TRUE(is_prime_u64(pp.p)) << pp.p;
    EXPECT_TRUE(is_prime_u64(pp.q)) << pp.q;
    EXPECT_GT(pp.p, uint64_t(1) << 61);
    EXPECT_LT(pp.p, uint64_t(1) << 62);
    EXPECT_GT(pp.q, uint64_t(1) << 30);
    EXPECT_LT(pp.q, uint64_t(1) << 31);
    EXPECT_EQ((pp.p - 1) % pp.q, 0u);
    EXPECT_NE(pp.g, 1u);
    EXPECT_EQ(pow_mod_u64(pp.g, pp.q, pp.p), 1u);  // q prime: the order of g is exactly q
  }
}

TEST(PrimePairs, MillerRabinKnowsSmallCases) {
  EXPECT_FALSE(is_prime_u64(1));
  EXPECT_TRUE(is_prime_u64(2));
  EXPECT_TRUE(is_prime_u64(2147483647));              // 2^31 - 1
  EXPECT_FALSE(is_prime_u64(3215031751ull));          // strong pseudoprime to 2, 3, 5, 7
  EXPECT_TRUE(is_prime_u64(2305843009213693951ull));  // 2^61 - 1
  EXPECT_FALSE(is_prime_u64(2305843009213693953ull));
}

TEST(Montgomery, AgreesWithPlainModularArithmetic) {
  std::mt19937_64 rng(7);
  for (const PrimePair& pp : prime_pairs()) {
    Mont64 m(pp.p);
    Mont32 n(static_cast<uint32_t>(pp.q));
    for (int i = 0; i < 1000; ++i) {
      uint64_t x = rng() % pp.p, y = rng() % pp.p;
      uint64_t want = static_cast<uint64_t>(static_cast<unsigned __int128>(x) * y % pp.p);
      EXPECT_EQ(m.from(m.mul(m.to(x), m.to(y))), want);
      EXPECT_EQ(m.from(m.mul(m.inv(m.to(x | 1)), m.to(x | 1))), 1u);
      uint64_t u = rng() % pp.q, v = rng() % pp.q;
      EXPECT_EQ(n.from(n.mul(n.to(u), n.to(v))), u * v % pp.q);
    }
  }
}

class Field : public ::testing::Test {
 protected:
  std::atomic<uint64_t> zero_divs{0};
  FieldDomain d{field_context(0), 42, &zero_divs};
  FieldValue r(int64_t e) const { return d.random(1, e); }
  Attrs none;
};

TEST_F(Field, ExpIsAHomomorphismFromAdditionToMultiplication) {
  for (int i = 0; i < 100; ++i) {
    FieldValue x = r(i), y = r(1000 + i);
    EXPECT_TRUE(same_value(d.exp(d.add(x, y)), d.mul(d.exp(x), d.exp(y))));
    EXPECT_TRUE(same_value(d.exp(d.sub(x, y)), d.binary(OpKind::Div, d.exp(x), d.exp(y))));
  }
  EXPECT_TRUE(same_value(d.exp(d.from_double(0)), d.from_double(1)));
}

TEST_F(Field, ConstantsAreExactRationals) {
  FieldValue three = d.from_int(3), half = d.from_double(0.5);
  EXPECT_TRUE(same_value(d.mul(half, d.from_int(2)), d.from_double(1)));
  EXPECT_TRUE(same_value(d.from_double(1.5), d.add(d.from_double(1), half)));
  EXPECT_TRUE(same_value(d.from_double(-0.75), d.neg(d.mul(three, d.from_double(0.25)))));
  // The double nearest 1/n is 1/n: mean(x) = x * (1/n) agrees with x / n for any n.
  EXPECT_TRUE(same_value(d.mul(d.from_double(1.0 / 6144), d.from_int(6144)), d.from_double(1)));
  EXPECT_TRUE(same_value(d.from_double(1.0 / 3), d.inverse(three)));
  // 1e-6 and 1e-5 are different constants.
  EXPECT_FALSE(same_value(d.from_double(1e-6), d.from_double(1e-5)));
  EXPECT_TRUE(same_value(d.from_double(1e-6), d.inverse(d.from_int(1000000))));
  EXPECT_TRUE(same_value(d.from_double(3.0e9), d.mul(d.from_int(3000000), d.from_int(1000))));
  EXPECT_EQ(zero_divs.load(), 0u);
}

TEST_F(Field, CompositesAgreeWithTheirSpellings) {
  for (int i = 0; i < 50; ++i) {
    FieldValue x = r(i);
    EXPECT_TRUE(
        same_value(d.unary(OpKind::Silu, none, x), d.mul(x, d.unary(OpKind::Sigmoid, none, x))));
    EXPECT_TRUE(
        same_value(d.unary(OpKind::Rsqrt, none, x), d.inverse(d.unary(OpKind::Sqrt, none, x))));
    EXPECT_TRUE(
        same_value(d.unary(OpKind::Relu, none, x), d.binary(OpKind::Maximum, x, d.from_double(0))));
    EXPECT_TRUE(same_value(d.unary(OpKind::Square, none, x), d.mul(x, x)));
    EXPECT_TRUE(
        same_value(d.unary(OpKind::Reciprocal, none, x), d.binary(OpKind::Div, d.from_int(1), x)));
  }
}

TEST_F(Field, PseudoRandomFunctionsAreConsistentAndDistinct) {
  FieldValue x = r(1), y = r(2);
  Attrs tanh_gelu;
  tanh_gelu.approximate = GeluApprox::Tanh;
  Attrs slope2;
  slope2.negative_slope = 0.2;
  for (OpKind k : {OpKind::Sqrt, OpKind::Sigmoid, OpKind::Tanh, OpKind::Log, OpKind::Gelu,
                   OpKind::LeakyRelu}) {
    EXPECT_TRUE(same_value(d.unary(k, none, x), d.unary(k, none, x)));
    EXPECT_FALSE(same_value(d.unary(k, none, x), d.unary(k, none, y)));
  }
  EXPECT_FALSE(same_value(d.unary(OpKind::Sqrt, none, x), d.unary(OpKind::Tanh, none, x)));
  EXPECT_FALSE(same_value(d.unary(OpKind::Gelu, none, x), d.unary(OpKind::Gelu, tanh_gelu, x)));
  EXPECT_FALSE(
      same_value(d.unary(OpKind::LeakyRelu, none, x), d.unary(OpKind::LeakyRelu, slope2, x)));
  // Another seed is another function.
  FieldDomain other(field_context(0), 43, nullptr);
  EXPECT_FALSE(same_value(d.unary(OpKind::Sqrt, none, x), other.unary(OpKind::Sqrt, none, x)));
}

TEST_F(Field, MaxIsASelectionThatIsAssociativeAndCommutative) {
  int picked_first = 0;
  for (int i = 0; i < 200; ++i) {
    FieldValue x = r(3 * i), y = r(3 * i + 1), z = r(3 * i + 2);
    FieldValue m = d.max(x, y);
    EXPECT_TRUE(same_value(m, x) || same_value(m, y));
    EXPECT_TRUE(same_value(m, d.max(y, x)));
    EXPECT_TRUE(same_value(d.max(d.max(x, y), z), d.max(x, d.max(y, z))));
    FieldValue mn = d.binary(OpKind::Minimum, x, y);
    EXPECT_TRUE(same_value(mn, same_value(m, x) ? y : x));
    picked_first += same_value(m, x);
  }
  EXPECT_GT(picked_first, 50);  // the order is not biased towards an argument position
  EXPECT_LT(picked_first, 150);
}

TEST_F(Field, MaxSubtractionCancelsThroughExp) {
  // softmax with any subtracted value equals the plain one.
  FieldValue x0 = r(1), x1 = r(2), m = d.max(x0, x1);
  FieldValue e0 = d.exp(d.sub(x0, m)), e1 = d.exp(d.sub(x1, m));
  FieldValue p0 = d.exp(x0), p1 = d.exp(x1);
  EXPECT_TRUE(same_value(d.binary(OpKind::Div, e0, d.add(e0, e1)),
                         d.binary(OpKind::Div, p0, d.add(p0, p1))));
}

TEST_F(Field, DivisionByZeroIsCounted) {
  d.binary(OpKind::Div, r(1), d.from_double(0));
  EXPECT_EQ(zero_divs.load(), 1u);
  d.unary(OpKind::Reciprocal, none, d.sub(r(5), r(5)));
  EXPECT_EQ(zero_divs.load(), 2u);
}

}  // namespace
}  // namespace kiln::verifier
