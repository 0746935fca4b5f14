// lowbit_kernel.hpp's loop in AVX-512, sixteen columns (two column groups) per register, with separate and
// with fused rounding: compiled with -mavx512f -mfma, run only where the CPU reports AVX-512F
// (lowbit_kernel.cpp decides). Each lane does what the 8-lane instances do; only the width differs.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "lowbit_kernel_tiles.hpp"

#if !defined(__AVX512F__) || !defined(__FMA__)
#error "lowbit_kernel_avx512.cpp must be compiled with -mavx512f -mfma"
#endif

namespace gsurg::lowbit::detail {

namespace {

template <bool kFused>
struct Avx512 {
  static constexpr int kSpan = 2;
  using F = __m512;
  using I = __m512i;
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  // Two groups' kLanes values, stride apart, in the low and the high half.
  static F load_groups(const float* p, size_t stride) {
    const __m512d lo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(p)));
    return _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps(p + stride)), 1));
  }
  static I load_group_words(const uint32_t* p, size_t stride) {
    const __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_inserti64x4(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + stride)), 1);
  }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static I shl(I x, int n) { return _mm512_sll_epi32(x, _mm_cvtsi32_si128(n)); }
  static I sra(I x, int n) { return _mm512_sra_epi32(x, _mm_cvtsi32_si128(n)); }
  static I shr(I x, int n) { return _mm512_srl_epi32(x, _mm_cvtsi32_si128(n)); }
  static I bor(I x, I y) { return _mm512_or_si512(x, y); }
  static F to_float(I x) { return _mm512_cvtepi32_ps(x); }
  static F mul(F x, F y) { return _mm512_mul_ps(x, y); }
  static F madd(F acc, F x, F y) {
    if (kFused) return _mm512_fmadd_ps(x, y, acc);
    return _mm512_add_ps(acc, _mm512_mul_ps(x, y));
  }
};

}  // namespace

void gemm_avx512(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
                 float* out, size_t out_stride, int threads) {
  run<Avx512<false>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

void gemm_avx512_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                     float alpha, float* out, size_t out_stride, int threads) {
  run<Avx512<true>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

}  // namespace gsurg::lowbit::detail
