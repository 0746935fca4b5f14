// The portable 8- and 16-lane vector types of lowbit_kernel_tiles.hpp (plain loops over the lanes), for
// lowbit_kernel.cpp and, built with -mfma so that std::fma is one instruction, lowbit_kernel_avx2_fma.cpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "gsurg/lowbit_kernel.hpp"

namespace gsurg::lowbit::detail {

// Internal to each file that includes it: the files are built with different instruction sets, and one
// instance must not stand in for another at link time.
namespace {

// kSpanGroups 1: eight lanes, as the SIMD instances of that width; 2: sixteen, the 16-lane (AVX-512) loop's
// logic in portable code, so that every build proves its pairing of column groups.
template <bool kFused, int kSpanGroups = 1>
struct Scalar {
  static constexpr int kSpan = kSpanGroups;
  static constexpr int kWidth = kSpanGroups * kLanes;
  struct F {
    float v[kWidth];
  };
  struct I {
    int32_t v[kWidth];
  };
  static F load(const float* p) {
    F x;
    for (int l = 0; l < kWidth; ++l) x.v[l] = p[l];
    return x;
  }
  static void store(float* p, const F& x) {
    for (int l = 0; l < kWidth; ++l) p[l] = x.v[l];
  }
  static F load_groups(const float* p, size_t stride) {
    F x;
    for (int l = 0; l < kWidth; ++l) x.v[l] = p[l / kLanes * stride + l % kLanes];
    return x;
  }
  static F set1(float s) {
    F x;
    for (float& e : x.v) e = s;
    return x;
  }
  static I load_group_words(const uint32_t* p, size_t stride) {
    I x;
    for (int l = 0; l < kWidth; ++l) x.v[l] = static_cast<int32_t>(p[l / kLanes * stride + l % kLanes]);
    return x;
  }
  // Shifts on the unsigned bits (a left shift of a negative int is undefined before C++20); sra relies on
  // >> of a negative int32 being arithmetic, as every compiler this builds with makes it.
  static I shl(const I& x, int n) {
    I y;
    for (int l = 0; l < kWidth; ++l) y.v[l] = static_cast<int32_t>(static_cast<uint32_t>(x.v[l]) << n);
    return y;
  }
  static I sra(const I& x, int n) {
    I y;
    for (int l = 0; l < kWidth; ++l) y.v[l] = x.v[l] >> n;
    return y;
  }
  static I shr(const I& x, int n) {
    I y;
    for (int l = 0; l < kWidth; ++l) y.v[l] = static_cast<int32_t>(static_cast<uint32_t>(x.v[l]) >> n);
    return y;
  }
  static I bor(const I& x, const I& y) {
    I z;
    for (int l = 0; l < kWidth; ++l) z.v[l] = x.v[l] | y.v[l];
    return z;
  }
  static F to_float(const I& x) {
    F y;
    for (int l = 0; l < kWidth; ++l) y.v[l] = static_cast<float>(x.v[l]);
    return y;
  }
  static F mul(const F& x, const F& y) {
    F z;
    for (int l = 0; l < kWidth; ++l) z.v[l] = x.v[l] * y.v[l];
    return z;
  }
  static F madd(const F& acc, const F& v, const F& w) {
    F z;
    for (int l = 0; l < kWidth; ++l)
      z.v[l] = kFused ? std::fma(v.v[l], w.v[l], acc.v[l]) : acc.v[l] + v.v[l] * w.v[l];
    return z;
  }
};

}  // namespace

}  // namespace gsurg::lowbit::detail
