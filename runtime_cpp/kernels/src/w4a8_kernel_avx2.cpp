// The w4a8 kernel (w4a8_kernel.hpp) for x86 with AVX2: the sixteen columns of a group in two halves of
// eight; per 32-byte load (eight k of eight columns) the low and high nibbles each go through vpmaddubsw
// (codes + 8 unsigned, the row's inputs signed: pairs of products, |x| <= 2 * 15 * 127), the two added
// (<= 7620, no saturation) and summed to 32-bit lanes by vpmaddwd with ones. Up to four rows per load.
// Built with -ffp-contract=off.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "w4a8_kernel_instances.hpp"

namespace gsurg::w4a8::detail {

namespace {

// R rows (row0 ..) times half h (columns 8h .. 8h + 7) of one group.
template <int R>
void half_rows(const Weights& w, const unsigned char* group, int h, const QuantizedInput& in, int row0,
               float* out, size_t out_stride, int lanes) {
  const size_t rec_bytes = record_bytes(w.block);
  const int chunks = w.block / 8;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 fsum[R];
  for (int r = 0; r < R; ++r) fsum[r] = _mm256_setzero_ps();
  for (int b = 0; b < in.blocks; ++b) {
    const unsigned char* rec = group + rec_bytes * b;
    const signed char* pa[R];
    for (int r = 0; r < R; ++r)
      pa[r] = in.q.data() + static_cast<size_t>(row0 + r) * w.K + static_cast<size_t>(b) * w.block;
    __m256i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    for (int c = 0; c < chunks; ++c) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 64 * c + 32 * h));
      const __m256i wl = _mm256_and_si256(bytes, low4);
      const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      for (int r = 0; r < R; ++r) {
        int32_t a0, a1;
        std::memcpy(&a0, pa[r] + 8 * c, 4);
        std::memcpy(&a1, pa[r] + 8 * c + 4, 4);
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(wl, _mm256_set1_epi32(a0)),
                                               _mm256_maddubs_epi16(wh, _mm256_set1_epi32(a1)));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 descale_w =
        _mm256_loadu_ps(reinterpret_cast<const float*>(rec + static_cast<size_t>(w.block) / 2 * kLanes) + 8 * h);
    for (int r = 0; r < R; ++r) {
      const size_t at = static_cast<size_t>(row0 + r) * in.blocks + b;
      const __m256i isum = _mm256_sub_epi32(acc[r], _mm256_set1_epi32(in.correction[at]));
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(in.descale[at]), descale_w);
      fsum[r] = _mm256_add_ps(fsum[r], _mm256_mul_ps(_mm256_cvtepi32_ps(isum), d));
    }
  }
  const int n = std::max(0, std::min(8, lanes - 8 * h));
  for (int r = 0; r < R; ++r) {
    float row[8];
    _mm256_storeu_ps(row, fsum[r]);
    std::memcpy(out + static_cast<size_t>(row0 + r) * out_stride + 8 * h, row, sizeof(float) * static_cast<size_t>(n));
  }
}

}  // namespace

void gemm_avx2(const Weights& w, const QuantizedInput& in, float* out, size_t out_stride, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    const unsigned char* group = w.data.get() + w.group_bytes * g;
    const int lanes = std::min(kLanes, w.N - g * kLanes);
    float* o = out + static_cast<size_t>(g) * kLanes;
    for (int h = 0; h < 2 && 8 * h < lanes; ++h) {
      int i = 0;
      for (; i + 4 <= in.M; i += 4) half_rows<4>(w, group, h, in, i, o, out_stride, lanes);
      for (; i < in.M; ++i) half_rows<1>(w, group, h, in, i, o, out_stride, lanes);
    }
  }
}

}  // namespace gsurg::w4a8::detail
