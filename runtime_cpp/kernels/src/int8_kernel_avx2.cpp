// The 8-bit kernel's arithmetic for x86 with AVX2 and FMA and no AVX-512 VNNI (int8_kernel.hpp): the same
// layout, the same float steps, an integer dot product without VNNI. Built with -mavx2 -mfma
// -ffp-contract=off: every multiply-add below that is fused is an explicit fma, as ncnn's build computes it
// (its AVX2 object's one-row loop: vfmadd231ps); nothing else is.
//
// The integer sums are exact in any order, so only how they are formed needs care: vpmaddubsw multiplies
// unsigned by signed bytes and adds pairs into int16 with saturation, and a pair must never reach it.
// A row's codes are quantized to [-127, 127]; the kernel feeds |a| as the unsigned operand and the weight
// with a's sign as the signed one (vpsignb), so a pair is at most 2 * 127 * 127 = 32258. A weight of -128
// (the packer records whether any block holds one: Int8Weights::has_min_code) would keep its sign under
// vpsignb, so such weights take the other split, |b| unsigned and a with b's sign (at most 2 * 128 * 127 =
// 32512), one instruction more per 32 weights.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "int8_kernel_rows.hpp"
#include "gsurg/int8_kernel.hpp"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "int8_kernel_avx2.cpp must be compiled with -mavx2 -mfma"
#endif

namespace gsurg::int8k::detail {

namespace {

// One row of A, quantized per block as ncnn's x86 kernel does (int8_kernel.hpp): the signed codes a_q and
// their magnitudes |a_q|.
void quantize_row(const Int8Weights& w, const float* v, signed char* q, unsigned char* mag, float* descales,
                  Descale descale, bool approximate) {
  const int blocks = w.K / w.block;
  const float* ps = w.input_scales.empty() ? nullptr : w.input_scales.data();
  for (int b = 0; b < blocks; ++b) {
    const int k0 = b * w.block;
    const float absmax = block_absmax(v, ps, k0, w.block);
    float scale = 0.f;
    if (absmax != 0.f && approximate) {
      // ncnn's multi-row paths: 127 * ((r0 + r0) - r0 * (r0 * absmax)), r0 the approximate reciprocal
      const __m128 x = _mm_set_ss(absmax);
      const __m128 r0 = _mm_rcp_ss(x);
      const __m128 r = _mm_sub_ss(_mm_add_ss(r0, r0), _mm_mul_ss(r0, _mm_mul_ss(r0, x)));
      scale = _mm_cvtss_f32(_mm_mul_ss(_mm_set_ss(127.f), r));
    } else if (absmax != 0.f) {
      scale = 127.f / absmax;
    }
    descales[b] = input_descale(absmax, descale);
    for (int k = k0; k < k0 + w.block; ++k) {
      // ncnn's one- and two-row paths scale v * input_scale; GCC reassociates its 8- and 4-row paths to
      // (v * scale) * input_scale (read in gemm_x86_avx2.cpp.o).
      const float t = !ps ? v[k] * scale : approximate ? (v[k] * scale) * ps[k] : (v[k] * ps[k]) * scale;
      const int i = code_of(t);
      q[k] = static_cast<signed char>(i);
      mag[k] = static_cast<unsigned char>(i < 0 ? -i : i);
    }
  }
}

// The 8 int32 sums of 4 consecutive products each: codes b (32 bytes: 8 lanes of 4 k) times the row's 4
// bytes a (broadcast), |a| broadcast in mag.
template <bool kMinCode>
inline __m256i dot4(__m256i b, __m256i a, __m256i mag, __m256i ones16) {
  __m256i pairs;
  if (kMinCode) pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(b), _mm256_sign_epi8(a, b));
  else pairs = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(pairs, ones16);
}

inline __m256i broadcast4(const void* p) {
  int32_t x;
  std::memcpy(&x, p, 4);
  return _mm256_set1_epi32(x);
}

// R rows (quantized: q and mag rows of K bytes, da rows of K / block descales) times one group of 16
// columns, as two halves of 8 lanes, each sum times alpha after its last block.
template <int R, bool kMinCode>
void group_rows(const Int8Weights& w, const unsigned char* group, const signed char* q, const unsigned char* mag,
                const float* da, int row0, float alpha, float* out, size_t out_stride, int lanes) {
  const int blocks = w.K / w.block;
  const size_t rec = record_bytes(w.block);
  const int steps = w.block / 4;
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const unsigned char* codes = group + rec * b;
    __m256i slo[R], shi[R];
    for (int r = 0; r < R; ++r) slo[r] = shi[r] = _mm256_setzero_si256();
    const size_t a0 = static_cast<size_t>(b) * w.block;
    _mm_prefetch(reinterpret_cast<const char*>(codes + rec), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(codes + rec + 64 * (steps / 2)), _MM_HINT_T0);
    for (int s = 0; s < steps; ++s) {
      const __m256i blo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * s));
      const __m256i bhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * s + 32));
      for (int r = 0; r < R; ++r) {
        const size_t at = static_cast<size_t>(row0 + r) * w.K + a0 + 4 * static_cast<size_t>(s);
        const __m256i a = broadcast4(q + at);
        const __m256i m = kMinCode ? a : broadcast4(mag + at);
        slo[r] = _mm256_add_epi32(slo[r], dot4<kMinCode>(blo, a, m, ones16));
        shi[r] = _mm256_add_epi32(shi[r], dot4<kMinCode>(bhi, a, m, ones16));
      }
    }
    const float* descale_b = reinterpret_cast<const float*>(codes + static_cast<size_t>(w.block) * kLanes + 64);
    const __m256 dblo = _mm256_loadu_ps(descale_b);
    const __m256 dbhi = _mm256_loadu_ps(descale_b + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 dA = _mm256_set1_ps(da[static_cast<size_t>(row0 + r) * blocks + b]);
      lo[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(slo[r]), _mm256_mul_ps(dA, dblo), lo[r]);
      hi[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(shi[r]), _mm256_mul_ps(dA, dbhi), hi[r]);
    }
  }
  if (alpha != 1.f) {  // ncnn's unpack: one multiply of the finished sum, none at alpha 1 (int8_kernel.hpp)
    const __m256 va = _mm256_set1_ps(alpha);
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm256_mul_ps(lo[r], va);
      hi[r] = _mm256_mul_ps(hi[r], va);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* o = out + static_cast<size_t>(row0 + r) * out_stride;
    if (lanes >= kLanes) {
      _mm256_storeu_ps(o, lo[r]);
      _mm256_storeu_ps(o + 8, hi[r]);
    } else {
      float tmp[kLanes];
      _mm256_storeu_ps(tmp, lo[r]);
      _mm256_storeu_ps(tmp + 8, hi[r]);
      std::memcpy(o, tmp, sizeof(float) * static_cast<size_t>(lanes));
    }
  }
}

template <bool kMinCode>
void all_groups(const Int8Weights& w, const signed char* q, const unsigned char* mag, const float* da, int M,
                float alpha, float* out, size_t out_stride, int threads) {
  (void)threads;  // unused without OpenMP
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    const unsigned char* group = w.data.get() + w.group_bytes * g;
    const int lanes = std::min(kLanes, w.N - g * kLanes);
    float* o = out + static_cast<size_t>(g) * kLanes;
    int i = 0;
    for (; i + 2 <= M; i += 2) group_rows<2, kMinCode>(w, group, q, mag, da, i, alpha, o, out_stride, lanes);
    for (; i < M; ++i) group_rows<1, kMinCode>(w, group, q, mag, da, i, alpha, o, out_stride, lanes);
  }
}

}  // namespace

void reciprocals_avx2(const float* x, float* out) {
  for (int h = 0; h < kLanes; h += 4) {
    const __m128 a = _mm_loadu_ps(x + h);
    const __m128 x0 = _mm_rcp_ps(a);
    // (x0 + x0) - x0 * (x0 * a), the operations and order of ncnn's pack (its AVX2 object's 4-column loop)
    _mm_storeu_ps(out + h, _mm_sub_ps(_mm_add_ps(x0, x0), _mm_mul_ps(x0, _mm_mul_ps(x0, a))));
  }
}

void gemm_avx2(const Int8Weights& w, const float* a, size_t a_stride, int M, float alpha, float* out,
               size_t out_stride, int threads, Descale descale, RowForms rows) {
  const int blocks = w.K / w.block;
  std::vector<signed char> q(static_cast<size_t>(M) * w.K);
  std::vector<unsigned char> mag(static_cast<size_t>(M) * w.K);
  std::vector<float> da(static_cast<size_t>(M) * blocks);
#pragma omp parallel for num_threads(threads) schedule(static) if (M > 1)
  for (int i = 0; i < M; ++i) {
    bool approximate = false;
    if (rows.tile_m > 0) {  // the row's place in ncnn's tile: the tile's last rows % 4 are divided
      const int tile_rows = std::min(M - i / rows.tile_m * rows.tile_m, rows.tile_m);
      approximate = i % rows.tile_m < tile_rows - tile_rows % 4;
    }
    quantize_row(w, a + static_cast<size_t>(i) * a_stride, q.data() + static_cast<size_t>(i) * w.K,
                 mag.data() + static_cast<size_t>(i) * w.K, da.data() + static_cast<size_t>(i) * blocks, descale,
                 approximate);
  }
  if (w.has_min_code) all_groups<true>(w, q.data(), mag.data(), da.data(), M, alpha, out, out_stride, threads);
  else all_groups<false>(w, q.data(), mag.data(), da.data(), M, alpha, out, out_stride, threads);
}

}  // namespace gsurg::int8k::detail
