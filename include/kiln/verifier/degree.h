// The degree domain: a second instantiation of the generic evaluation core whose "values" are
// sound upper bounds on the degree of what the field domain computes, so that the
// Schwartz-Zippel bound of a verification is derived from the very traversal that is verified.
//
// Every value is a rational function num/den of the input variables; the domain tracks
// (n, m) >= (deg num, deg den) with the rules of fraction arithmetic:
//   input (1, 0)   constant (0, 0)   x*y (n1+n2, m1+m2)   x/y (n1+m2, m1+n2)
//   x+y, x-y (max(n1+m2, n2+m1), m1+m2)   (a sum of k terms of denominator degree m thus gets
//   denominator degree k*m: no common denominator is assumed)
//   selection (max, maximum, min, relu, clamp) the componentwise max of its arguments and (1, 0)
//   exp and every PRF  a fresh variable (1, 0); the degree of the argument (n + m) is recorded
//   in the Stats, since the probability that two different arguments collide enters the bound.
// Degrees saturate at kDegreeCap. docs/verifier.md turns these numbers into the bound.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kiln/interp/domain.h"

namespace kiln::verifier {

inline constexpr uint32_t kDegreeCap = uint32_t(1) << 30;

struct Degree {
  uint32_t n = 0, m = 0;
};

class DegreeDomain {
 public:
  using V = Degree;

  struct Stats {
    std::atomic<uint32_t> exp_arg{0};     // max n + m over exp arguments
    std::atomic<uint32_t> prf_arg{0};     // max n + m over PRF arguments (sqrt, sigmoid, ...)
    std::atomic<uint64_t> selections{0};  // selections evaluated (max, relu, clamp, ...)
  };

  explicit DegreeDomain(Stats* stats) : stats_(stats) {}

  static uint32_t sat(uint64_t x) { return x > kDegreeCap ? kDegreeCap : uint32_t(x); }

  V from_double(double) const { return {0, 0}; }
  V round_store(V x, DType) const { return x; }
  // A selection returns one of its arguments, or (FieldDomain's free_selections) a fresh
  // variable of degree (1, 0): the componentwise max with (1, 0) bounds both.
  V max(V x, V y) const {
    if (stats_) stats_->selections.fetch_add(1, std::memory_order_relaxed);
    return {std::max({x.n, y.n, 1u}), std::max(x.m, y.m)};
  }
  // The table's degree rules (kiln/ir/elementwise.h).
  V binary(OpKind k, V x, V y) const {
    switch (degree_rule(k)) {
      case DegreeRule::AddSub:
        if (x.m == 0 && y.m == 0) return {std::max(x.n, y.n), 0};
        return {sat(std::max(uint64_t(x.n) + y.m, uint64_t(y.n) + x.m)), sat(uint64_t(x.m) + y.m)};
      case DegreeRule::Mul:
        return {sat(uint64_t(x.n) + y.n), sat(uint64_t(x.m) + y.m)};
      case DegreeRule::Div:
        return {sat(uint64_t(x.n) + y.m), sat(uint64_t(x.m) + y.n)};
      case DegreeRule::SelectPair:
        return max(x, y);
      case DegreeRule::Same:
      case DegreeRule::Square:
      case DegreeRule::Swap:
      case DegreeRule::Exp:
      case DegreeRule::Opaque:
      case DegreeRule::InvOpaque:
      case DegreeRule::TimesOpaque:
      case DegreeRule::Select:
        break;
    }
    throw InternalError(fmt::format("degree: {} is not a binary op", op_name(k)));
  }
  V unary(OpKind k, const Attrs&, V x) const {
    switch (degree_rule(k)) {
      case DegreeRule::Same:
        return x;
      case DegreeRule::Square:
        return {sat(2 * uint64_t(x.n)), sat(2 * uint64_t(x.m))};
      case DegreeRule::Swap:
        return {x.m, x.n};
      case DegreeRule::Exp:
        record(stats_ ? &stats_->exp_arg : nullptr, x);
        return {1, 0};
      case DegreeRule::Opaque:
        record(stats_ ? &stats_->prf_arg : nullptr, x);
        return {1, 0};
      case DegreeRule::InvOpaque:
        record(stats_ ? &stats_->prf_arg : nullptr, x);
        return {0, 1};
      case DegreeRule::TimesOpaque:
        record(stats_ ? &stats_->prf_arg : nullptr, x);
        return {sat(x.n + 1ull), x.m};
      case DegreeRule::Select:
        return max(x, V{});
      case DegreeRule::AddSub:
      case DegreeRule::Mul:
      case DegreeRule::Div:
      case DegreeRule::SelectPair:
        break;
    }
    throw InternalError(fmt::format("degree: {} is not a unary op", op_name(k)));
  }

 private:
  static void record(std::atomic<uint32_t>* slot, V x) {
    if (!slot) return;
    uint32_t d = sat(uint64_t(x.n) + x.m), cur = slot->load(std::memory_order_relaxed);
    while (d > cur && !slot->compare_exchange_weak(cur, d, std::memory_order_relaxed)) {
    }
  }
  Stats* stats_;
};

static_assert(interp::ValueDomain<DegreeDomain>);

}  // namespace kiln::verifier
