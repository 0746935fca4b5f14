// lowbit_kernel.hpp's loop in AVX2: compiled with -mavx2 (and no FMA: x86 ncnn does not fuse either), run
// only where the CPU reports AVX2 (lowbit_kernel.cpp decides).
#include <immintrin.h>

#include "lowbit_kernel_tiles.hpp"

namespace pvl::lowbit::detail {

namespace {

struct Avx2 {
  using F = __m256;
  using I = __m256i;
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static I load_words(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I shl(I x, int n) { return _mm256_sll_epi32(x, _mm_cvtsi32_si128(n)); }
  static I sra(I x, int n) { return _mm256_sra_epi32(x, _mm_cvtsi32_si128(n)); }
  static I shr(I x, int n) { return _mm256_srl_epi32(x, _mm_cvtsi32_si128(n)); }
  static I bor(I x, I y) { return _mm256_or_si256(x, y); }
  static F to_float(I x) { return _mm256_cvtepi32_ps(x); }
  static F mul(F x, F y) { return _mm256_mul_ps(x, y); }
  static F madd(F acc, F v, F w) { return _mm256_add_ps(acc, _mm256_mul_ps(v, w)); }
};

}  // namespace

void gemm_avx2(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
               float* out, size_t out_stride, int threads) {
  run<Avx2>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

}  // namespace pvl::lowbit::detail
