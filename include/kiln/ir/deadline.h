// A point in time past which long work stops: `kiln optimize --time-limit` hands one to the
// search, which hands it to the verifier, the float check and the interpreter, so that the limit
// holds on any input (docs/reliability.md, "Time"). A default Deadline never passes.
#pragma once

#include <chrono>
#include <limits>
#include <stdexcept>

namespace kiln {

// Thrown by Deadline::check once the deadline has passed. Not a UserError: whoever set the
// deadline catches it and reports what was cut.
struct DeadlinePassed : std::runtime_error {
  DeadlinePassed() : std::runtime_error("the time limit passed") {}
};

struct Deadline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point at = Clock::time_point::max();

  // `seconds` from now.
  static Deadline in(double seconds) {
    return {Clock::now() +
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))};
  }
  bool set() const { return at != Clock::time_point::max(); }
  bool passed() const { return set() && Clock::now() >= at; }
  // Seconds left (never negative; +inf when unset).
  double remaining_s() const {
    if (!set()) return std::numeric_limits<double>::infinity();
    double s = std::chrono::duration<double>(at - Clock::now()).count();
    return s > 0 ? s : 0;
  }
  void check() const {
    if (passed()) throw DeadlinePassed();
  }
};

}  // namespace kiln
