// The w4a8 kernel (w4a8_kernel.hpp) for x86 with AVX-512 VNNI: one 64-byte load holds eight k of sixteen
// columns; its low and high nibbles each feed one vpdpbusd (codes + 8 as unsigned bytes, the row's four
// quantized inputs broadcast as signed ones), up to four rows per load. Built with -ffp-contract=off.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "w4a8_kernel_instances.hpp"

namespace gsurg::w4a8::detail {

namespace {

// R rows (row0 ..) times one group of 16 columns.
template <int R>
void group_rows(const Weights& w, const unsigned char* group, const QuantizedInput& in, int row0, float* out,
                size_t out_stride, int lanes) {
  const size_t rec_bytes = record_bytes(w.block);
  const int chunks = w.block / 8;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 fsum[R];
  for (int r = 0; r < R; ++r) fsum[r] = _mm512_setzero_ps();
  for (int b = 0; b < in.blocks; ++b) {
    const unsigned char* rec = group + rec_bytes * b;
    _mm_prefetch(reinterpret_cast<const char*>(rec + rec_bytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(rec + rec_bytes + 64 * (chunks / 2)), _MM_HINT_T0);
    const signed char* pa[R];
    for (int r = 0; r < R; ++r)
      pa[r] = in.q.data() + static_cast<size_t>(row0 + r) * w.K + static_cast<size_t>(b) * w.block;
    __m512i lo[R], hi[R];
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_si512();
    for (int c = 0; c < chunks; ++c) {
      const __m512i bytes = _mm512_loadu_si512(rec + 64 * c);
      const __m512i wl = _mm512_and_si512(bytes, low4);
      const __m512i wh = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
      for (int r = 0; r < R; ++r) {
        int32_t a0, a1;
        std::memcpy(&a0, pa[r] + 8 * c, 4);
        std::memcpy(&a1, pa[r] + 8 * c + 4, 4);
        lo[r] = _mm512_dpbusd_epi32(lo[r], wl, _mm512_set1_epi32(a0));
        hi[r] = _mm512_dpbusd_epi32(hi[r], wh, _mm512_set1_epi32(a1));
      }
    }
    const __m512 descale_w = _mm512_loadu_ps(rec + static_cast<size_t>(w.block) / 2 * kLanes);
    for (int r = 0; r < R; ++r) {
      const size_t at = static_cast<size_t>(row0 + r) * in.blocks + b;
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(lo[r], hi[r]), _mm512_set1_epi32(in.correction[at]));
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(in.descale[at]), descale_w);
      fsum[r] = _mm512_add_ps(fsum[r], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), d));
    }
  }
  const __mmask16 mask = lanes >= kLanes ? static_cast<__mmask16>(0xffff)
                                         : static_cast<__mmask16>((1u << lanes) - 1u);
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(out + static_cast<size_t>(row0 + r) * out_stride, mask, fsum[r]);
}

}  // namespace

void gemm_avx512vnni(const Weights& w, const QuantizedInput& in, float* out, size_t out_stride, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    const unsigned char* group = w.data.get() + w.group_bytes * g;
    const int lanes = std::min(kLanes, w.N - g * kLanes);
    float* o = out + static_cast<size_t>(g) * kLanes;
    int i = 0;
    for (; i + 4 <= in.M; i += 4) group_rows<4>(w, group, in, i, o, out_stride, lanes);
    for (; i < in.M; ++i) group_rows<1>(w, group, in, i, o, out_stride, lanes);
  }
}

}  // namespace gsurg::w4a8::detail
