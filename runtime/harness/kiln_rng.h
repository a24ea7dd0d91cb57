// The documented seeded input generator (interp.h, docs/interpreter.md), written once for the
// host (tests include this file) and the device (the harness emitter inlines its text). Element
// e of input i under seed s is a pure function of (s, i, e):
//   stream = mix64(s + G (i + 1)),  z = mix64(stream + G (e + 1))        (G = 0x9e3779b97f4a7c15)
//   k = (z >> 40) - 2^23, with 0 replaced by 1;  x = k * 2^-24 exactly in float
// and the value is x rounded to the tensor's dtype with round-to-nearest-even.
// Normal inputs of standard deviation sd (the range rule of the spec format) come from a second
// stream of the same input (Irwin-Hall: 12 uniform 20-bit fractions summed, minus 6):
//   ns = mix64(stream ^ 0x6e6f726d616c),  u_j = mix64(ns + G (12 e + j + 1)) >> 44  (j < 12)
//   s = sum u_j - 6 * 2^20, with 0 replaced by 1;  x = ((float)s * 2^-20) * (float)sd
// s * 2^-20 is exact in float (|s| < 2^23), so the product with sd is the only rounding, the
// same IEEE multiplication on host and device.
#ifndef KILN_RNG_H
#define KILN_RNG_H

#include <stdint.h>

#ifndef KILN_RNG_HD
#if defined(__CUDACC__)
#define KILN_RNG_HD __host__ __device__ inline
#else
#define KILN_RNG_HD inline
#endif
#endif

KILN_RNG_HD uint64_t kiln_rng_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// The per-input stream key.
KILN_RNG_HD uint64_t kiln_rng_stream(uint64_t seed, int input_index) {
  return kiln_rng_mix64(seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(input_index) + 1));
}
// Element e's value before rounding to the dtype: a multiple of 2^-24 in [-0.5, 0.5), never 0.
KILN_RNG_HD float kiln_rng_value(uint64_t stream, uint64_t e) {
  uint64_t z = kiln_rng_mix64(stream + 0x9e3779b97f4a7c15ull * (e + 1));
  int32_t k = static_cast<int32_t>(z >> 40) - (1 << 23);
  if (k == 0) k = 1;
  return static_cast<float>(k) * 5.9604644775390625e-08f;  // 2^-24
}

// Element e's value for a normal input of standard deviation sd, before rounding to the dtype:
// mean 0, variance sd^2, in [-6 sd, 6 sd), never 0.
KILN_RNG_HD float kiln_rng_normal(uint64_t stream, uint64_t e, float sd) {
  const uint64_t ns = kiln_rng_mix64(stream ^ 0x6e6f726d616cull);
  int32_t s = 0;
  for (uint64_t j = 0; j < 12; ++j)
    s += static_cast<int32_t>(kiln_rng_mix64(ns + 0x9e3779b97f4a7c15ull * (12 * e + j + 1)) >> 44);
  s -= 6 << 20;
  if (s == 0) s = 1;
  const float x = static_cast<float>(s) * 9.5367431640625e-07f;  // 2^-20, exact
  return x * sd;
}

#endif  // KILN_RNG_H
