// The finite-field value domain of the verifier: the generic evaluation core (eval_core.h)
// instantiated with values in F_p x F_q instead of floats.
//
// A value is a pair (a mod p, b mod q) with q | p - 1 and g of order q in F_p*, so that
// exp(x) = g^(x mod q) mod p is a homomorphism from (F_q, +) to (F_p*, x): exp(a + b) =
// exp(a) exp(b) holds exactly and a softmax with any subtracted "max" equals the plain one.
// The q-part of an exp result has no homomorphic meaning, so a value carries a flag `t`
// ("exp-tainted": some exp on its path produced it); the q-part of a tainted value is never
// read: tainted values compare by their p-part alone, and exp of a tainted value is a seeded
// pseudo-random function (PRF) of its p-part (consistent, not homomorphic: exp(exp(x) + y)
// vs exp(exp(x)) exp(y) is a possible false negative, never a false positive).
//
// Everything else (docs/verifier.md has the argument):
//   add sub mul neg square        componentwise ring operations
//   div reciprocal                multiplication by the field inverse; a zero divisor makes the
//                                 trial inconclusive (counted in *zero_divs, the verifier retries)
//   constants                     the exact rational value of the double: 1/n (the double nearest
//                                 to it, n <= 2^53) maps to n^-1, anything else to m * 2^e exactly
//   sqrt log tanh sigmoid gelu    PRFs of the p-part, keyed by the trial seed and the op (gelu's
//   leaky_relu                    approximation and leaky_relu's slope are part of the key)
//   rsqrt = 1/sqrt, silu(x) = x * sigmoid(x), relu(x) = maximum(x, 0), clamp = min(max(x, lo), hi)
//   max maximum minimum           SELECTION under a seeded total order on values (SelectionOrder:
//                                 a hash of the p-part, ties broken by the value, optionally with
//                                 constant-only values above or below the rest): associative,
//                                 commutative, returns an argument
//   round_store                   identity
// Arithmetic is Montgomery multiplication: 64-bit (R = 2^64) for p < 2^62, 32-bit (R = 2^32)
// for q < 2^31. Values are kept in Montgomery form throughout; only equality matters.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/interp/domain.h"

namespace kiln::verifier {

// One modulus pair: p, q prime, q | p - 1, g of order q in F_p*.
struct PrimePair {
  uint64_t p;  // 2^61 < p < 2^62
  uint64_t q;  // 2^30 < q < 2^31
  uint64_t g;  // plain residue, order q
};

// The built-in pairs (q just below 2^31, p = k q + 1 just above 2^61). Trial i uses pair
// i mod size. The primality of every p and q and the order of g are checked by a test.
const std::vector<PrimePair>& prime_pairs();

// Deterministic Miller-Rabin for 64-bit n (bases 2..37). Exposed for the test.
bool is_prime_u64(uint64_t n);
uint64_t pow_mod_u64(uint64_t base, uint64_t exp, uint64_t mod);

// 64-bit mixing (splitmix64 finalizer): the hash behind PRFs, the order and random inputs.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Montgomery arithmetic modulo an odd n < 2^62 with R = 2^64.
struct Mont64 {
  uint64_t n = 0, ninv = 0, r2 = 0, one = 0;  // ninv = -n^-1 mod 2^64, r2 = R^2 mod n

  Mont64() = default;
  explicit Mont64(uint64_t mod);
  uint64_t redc(unsigned __int128 t) const {
    uint64_t m = static_cast<uint64_t>(t) * ninv;
    uint64_t r = static_cast<uint64_t>((t + static_cast<unsigned __int128>(m) * n) >> 64);
    return r >= n ? r - n : r;
  }
  uint64_t mul(uint64_t a, uint64_t b) const { return redc(static_cast<unsigned __int128>(a) * b); }
  uint64_t add(uint64_t a, uint64_t b) const {
    uint64_t s = a + b;
    return s >= n ? s - n : s;
  }
  uint64_t sub(uint64_t a, uint64_t b) const { return a >= b ? a - b : a + n - b; }
  uint64_t to(uint64_t x) const { return mul(x % n, r2); }
  uint64_t from(uint64_t x) const { return redc(x); }
  uint64_t pow(uint64_t x, uint64_t e) const;  // x in Montgomery form
  uint64_t inv(uint64_t x) const { return pow(x, n - 2); }
};

// Montgomery arithmetic modulo an odd n < 2^31 with R = 2^32.
struct Mont32 {
  uint32_t n = 0, ninv = 0, r2 = 0, one = 0;

  Mont32() = default;
  explicit Mont32(uint32_t mod);
  uint32_t redc(uint64_t t) const {
    uint32_t m = static_cast<uint32_t>(t) * ninv;
    uint32_t r = static_cast<uint32_t>((t + static_cast<uint64_t>(m) * n) >> 32);
    return r >= n ? r - n : r;
  }
  uint32_t mul(uint32_t a, uint32_t b) const { return redc(static_cast<uint64_t>(a) * b); }
  uint32_t add(uint32_t a, uint32_t b) const {
    uint32_t s = a + b;
    return s >= n ? s - n : s;
  }
  uint32_t sub(uint32_t a, uint32_t b) const { return a >= b ? a - b : a + n - b; }
  uint32_t to(uint64_t x) const { return mul(static_cast<uint32_t>(x % n), r2); }
  uint32_t from(uint32_t x) const { return redc(x); }
  uint32_t pow(uint32_t x, uint64_t e) const;
  uint32_t inv(uint32_t x) const { return pow(x, n - 2); }
};

// A field value. a: Montgomery form mod p; b: Montgomery form mod q (meaningless when t != 0).
struct FieldValue {
  uint64_t a = 0;
  uint32_t b = 0;
  uint16_t t = 0;  // exp-tainted
  uint16_t c = 0;  // computed from constants alone (no input reaches it): orders may single
                   // these out (SelectionOrder)
};

// How a trial orders values for selections (max, maximum, minimum, relu, clamp). Every mode is
// a total order (so selections stay associative, commutative and return an argument), random
// within the values of one kind: Random ignores kinds; ConstantsHigh puts every value computed
// from constants alone above every value an input reaches, ConstantsLow below, which is how real
// data behaves when a row lies wholly below (above) a constant such as relu's 0 or a max
// initialised to 0: the trials that take these modes catch such a difference on every element,
// not with probability 1/k.
enum class SelectionOrder : uint8_t { Random, ConstantsHigh, ConstantsLow };

// Equality as the verifier compares outputs: p-parts always, q-parts when neither is tainted.
inline bool same_value(const FieldValue& x, const FieldValue& y) {
  return x.a == y.a && (x.t || y.t || x.b == y.b);
}

// Precomputed per prime pair (shared, immutable): Montgomery contexts and tables of g^b.
struct FieldContext {
  PrimePair pair;
  Mont64 mp;
  Mont32 mq;
  uint64_t two_inv_p;  // 1/2 mod p, Montgomery form
  uint32_t two_inv_q;
  std::vector<uint64_t> g_lo, g_hi;  // g^(i) and g^(i * 2^16), Montgomery form mod p

  explicit FieldContext(const PrimePair& pp);
  uint64_t g_pow(uint32_t e) const { return mp.mul(g_lo[e & 0xffffu], g_hi[e >> 16]); }
};
// The context of prime_pairs()[i], built once.
const FieldContext& field_context(size_t i);

// The value domain (satisfies interp::ValueDomain). Cheap to copy; holds the trial seed.
class FieldDomain {
 public:
  using V = FieldValue;

  // zero_divs (may be null) counts divisions by a value that is 0 mod p or (untainted) mod q.
  // free_selections: every selection result is replaced by a fresh pseudo-random value keyed by
  // the selected one (a new variable of the polynomial model). A graph whose outputs are the same
  // with and without it does not depend on what its selections select (a max that is subtracted
  // inside exp and cancels); one whose outputs change does, and its verdict has no bound.
  FieldDomain(const FieldContext& ctx, uint64_t seed, std::atomic<uint64_t>* zero_divs,
              SelectionOrder order = SelectionOrder::Random, bool free_selections = false);

  V from_double(double x) const;
  V from_int(int64_t v) const;  // exact integer
  inline V unary(OpKind k, const Attrs& a, V x) const;
  inline V binary(OpKind k, V x, V y) const;
  V max(V x, V y) const { return selected(before(x, y) ? y : x); }
  V min(V x, V y) const { return selected(before(x, y) ? x : y); }
  V round_store(V x, DType) const { return x; }

  // Uniform random value (untainted) for element `e` of the input named by `input_key`.
  V random(uint64_t input_key, int64_t e) const;

  V add(V x, V y) const {
    return {f_.mp.add(x.a, y.a), f_.mq.add(x.b, y.b), uint16_t(x.t | y.t), uint16_t(x.c & y.c)};
  }
  V sub(V x, V y) const {
    return {f_.mp.sub(x.a, y.a), f_.mq.sub(x.b, y.b), uint16_t(x.t | y.t), uint16_t(x.c & y.c)};
  }
  V mul(V x, V y) const {
    return {f_.mp.mul(x.a, y.a), f_.mq.mul(x.b, y.b), uint16_t(x.t | y.t), uint16_t(x.c & y.c)};
  }
  V neg(V x) const { return {f_.mp.sub(0, x.a), f_.mq.sub(0, x.b), x.t, x.c}; }
  V inverse(V x) const;  // counts a zero divisor and returns 0
  V exp(V x) const;
  // A PRF value keyed by (seed, tag, p-part of x): uniform, untainted.
  V prf(uint64_t tag, V x) const;
  // The unknown function of op k (and `salt`, for attrs that change the function) at x: the
  // field meaning of a transcendental op (kiln/ir/elementwise.h).
  V opaque(OpKind k, V x, uint64_t salt = 0) const {
    return prf(mix64(static_cast<uint64_t>(k) + 0x7072660000ull) ^ salt, x);
  }
  static uint64_t mix(uint64_t z) { return mix64(z); }
  // The seeded total order: true if x comes strictly before y.
  bool before(V x, V y) const {
    if (x.c != y.c && order_ != SelectionOrder::Random)
      return order_ == SelectionOrder::ConstantsHigh ? x.c < y.c : x.c > y.c;
    uint64_t kx = mix64(x.a ^ order_key_), ky = mix64(y.a ^ order_key_);
    if (kx != ky) return kx < ky;
    if (x.a != y.a) return x.a < y.a;
    if (x.t != y.t) return x.t < y.t;
    return !x.t && x.b < y.b;
  }

  const FieldContext& context() const { return f_; }
  uint64_t seed() const { return seed_; }

 private:
  V dyadic(double x) const;
  V constant_value(double x) const;  // from_double without the constant flag
  V selected(V x) const { return free_ ? prf(0x73656c6563746564ull, x) : x; }

  const FieldContext& f_;
  uint64_t seed_, order_key_;
  std::atomic<uint64_t>* zero_divs_;
  SelectionOrder order_;
  bool free_;
};

// The ring operations are inline so that the core's element loops (which call binary/unary
// with a compile-time kind) compile to straight-line Montgomery arithmetic.
// The table's field semantics (kiln/ir/elementwise.h).
FieldDomain::V FieldDomain::binary(OpKind k, V x, V y) const {
  return with_binary(
      k, [&](auto t) { return Elementwise<decltype(t)::value>::field(*this, kNoAttrs, x, y); });
}

FieldDomain::V FieldDomain::unary(OpKind k, const Attrs& a, V x) const {
  return with_unary(k, [&](auto t) { return Elementwise<decltype(t)::value>::field(*this, a, x); });
}

static_assert(interp::ValueDomain<FieldDomain>);

}  // namespace kiln::verifier
