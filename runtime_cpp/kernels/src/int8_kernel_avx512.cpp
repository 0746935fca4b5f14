// The 8-bit kernel's arithmetic for x86 with AVX-512 VNNI (int8_kernel.hpp). Built with -ffp-contract=off:
// every multiply-add below that is fused is an explicit fma, as ncnn's build computes it; nothing else is.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "int8_kernel_rows.hpp"
#include "gsurg/int8_kernel.hpp"

namespace gsurg::int8k::detail {

namespace {

// One row of A, quantized per block as ncnn's x86 kernel does (int8_kernel.hpp), stored as a_q + 128.
void quantize_row(const Int8Weights& w, const float* v, unsigned char* q, float* descales, Descale descale) {
  const int blocks = w.K / w.block;
  const float* ps = w.input_scales.empty() ? nullptr : w.input_scales.data();
  for (int b = 0; b < blocks; ++b) {
    const int k0 = b * w.block;
    const float absmax = block_absmax(v, ps, k0, w.block);
    const float scale = absmax != 0.f ? 127.f / absmax : 0.f;
    descales[b] = input_descale(absmax, descale);
    for (int k = k0; k < k0 + w.block; ++k) {
      const float p = ps ? v[k] * ps[k] : v[k];
      q[k] = static_cast<unsigned char>(code_of(p * scale) + 128);
    }
  }
}

// R rows (A quantized: aq rows of K bytes, da rows of K / block descales) times one group of 16 columns,
// each sum times alpha after its last block.
template <int R>
void group_rows(const Int8Weights& w, const unsigned char* group, const unsigned char* aq, const float* da,
                int row0, float alpha, float* out, size_t out_stride, int lanes) {
  const int blocks = w.K / w.block;
  const size_t rec = record_bytes(w.block);
  const int steps = w.block / 4;
  __m512 fsum[R];
  for (int r = 0; r < R; ++r) fsum[r] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const unsigned char* codes = group + rec * b;
    __m512i s0[R], s1[R];
    for (int r = 0; r < R; ++r) s0[r] = s1[r] = _mm512_setzero_si512();
    const unsigned char* pa[R];
    for (int r = 0; r < R; ++r)
      pa[r] = aq + static_cast<size_t>(row0 + r) * w.K + static_cast<size_t>(b) * w.block;
    _mm_prefetch(reinterpret_cast<const char*>(codes + rec), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(codes + rec + 64 * (steps / 2)), _MM_HINT_T0);
    for (int s = 0; s < steps; s += 2) {
      const __m512i b0 = _mm512_loadu_si512(codes + 64 * s);
      const __m512i b1 = _mm512_loadu_si512(codes + 64 * (s + 1));
      for (int r = 0; r < R; ++r) {
        int32_t a0, a1;
        std::memcpy(&a0, pa[r] + 4 * s, 4);
        std::memcpy(&a1, pa[r] + 4 * s + 4, 4);
        s0[r] = _mm512_dpbusd_epi32(s0[r], _mm512_set1_epi32(a0), b0);
        s1[r] = _mm512_dpbusd_epi32(s1[r], _mm512_set1_epi32(a1), b1);
      }
    }
    const __m512i corr = _mm512_loadu_si512(codes + static_cast<size_t>(w.block) * kLanes);
    const __m512 descale_b = _mm512_loadu_ps(codes + static_cast<size_t>(w.block) * kLanes + 64);
    for (int r = 0; r < R; ++r) {
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(s0[r], s1[r]), corr);
      const float dA = da[static_cast<size_t>(row0 + r) * blocks + b];
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(dA), descale_b);
      fsum[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, fsum[r]);
    }
  }
  if (alpha != 1.f) {  // ncnn's unpack: one multiply of the finished sum, none at alpha 1 (int8_kernel.hpp)
    const __m512 va = _mm512_set1_ps(alpha);
    for (int r = 0; r < R; ++r) fsum[r] = _mm512_mul_ps(fsum[r], va);
  }
  const __mmask16 mask = lanes >= kLanes ? static_cast<__mmask16>(0xffff)
                                         : static_cast<__mmask16>((1u << lanes) - 1u);
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(out + static_cast<size_t>(row0 + r) * out_stride, mask, fsum[r]);
}

}  // namespace

void reciprocals_avx512(const float* x, float* out) {
  for (int h = 0; h < kLanes; h += 8) {
    const __m256 a = _mm256_loadu_ps(x + h);
    const __m256 x0 = _mm256_rcp_ps(a);
    // (x0 + x0) - x0 * (x0 * a), the operations and order of ncnn's pack (read in its object code)
    _mm256_storeu_ps(out + h, _mm256_sub_ps(_mm256_add_ps(x0, x0), _mm256_mul_ps(x0, _mm256_mul_ps(x0, a))));
  }
}

void gemm_avx512vnni(const Int8Weights& w, const float* a, size_t a_stride, int M, float alpha, float* out,
                     size_t out_stride, int threads, Descale descale) {
  const int blocks = w.K / w.block;
  std::vector<unsigned char> aq(static_cast<size_t>(M) * w.K);
  std::vector<float> da(static_cast<size_t>(M) * blocks);
#pragma omp parallel for num_threads(threads) schedule(static) if (M > 1)
  for (int i = 0; i < M; ++i)
    quantize_row(w, a + static_cast<size_t>(i) * a_stride, aq.data() + static_cast<size_t>(i) * w.K,
                 da.data() + static_cast<size_t>(i) * blocks, descale);

#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    const unsigned char* group = w.data.get() + w.group_bytes * g;
    const int lanes = std::min(kLanes, w.N - g * kLanes);
    float* o = out + static_cast<size_t>(g) * kLanes;
    int i = 0;
    for (; i + 4 <= M; i += 4) group_rows<4>(w, group, aq.data(), da.data(), i, alpha, o, out_stride, lanes);
    for (; i < M; ++i) group_rows<1>(w, group, aq.data(), da.data(), i, alpha, o, out_stride, lanes);
  }
}

}  // namespace gsurg::int8k::detail
