// The AVX2 vector type of lowbit_kernel_tiles.hpp, for lowbit_kernel_avx2.cpp (-mavx2: kFused false) and
// lowbit_kernel_avx2_fma.cpp (-mavx2 -mfma: kFused true, madd one vfmadd).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace gsurg::lowbit::detail {

// Internal to each file that includes it: the files are built with different instruction sets, and one
// instance must not stand in for another at link time.
namespace {

template <bool kFused>
struct Avx2 {
  static constexpr int kSpan = 1;
  using F = __m256;
  using I = __m256i;
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F load_groups(const float* p, size_t) { return load(p); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static I load_group_words(const uint32_t* p, size_t) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static I shl(I x, int n) { return _mm256_sll_epi32(x, _mm_cvtsi32_si128(n)); }
  static I sra(I x, int n) { return _mm256_sra_epi32(x, _mm_cvtsi32_si128(n)); }
  static I shr(I x, int n) { return _mm256_srl_epi32(x, _mm_cvtsi32_si128(n)); }
  static I bor(I x, I y) { return _mm256_or_si256(x, y); }
  static F to_float(I x) { return _mm256_cvtepi32_ps(x); }
  static F mul(F x, F y) { return _mm256_mul_ps(x, y); }
  static F madd(F acc, F x, F y) {
#if defined(__FMA__)
    if (kFused) return _mm256_fmadd_ps(x, y, acc);
#endif
    return _mm256_add_ps(acc, _mm256_mul_ps(x, y));
  }
};

}  // namespace

}  // namespace gsurg::lowbit::detail
