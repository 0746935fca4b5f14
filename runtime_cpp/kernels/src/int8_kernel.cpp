// The 8-bit kernel's layout and dispatch (int8_kernel.hpp); the arithmetic is in int8_kernel_avx512.cpp and
// int8_kernel_avx2.cpp.
#include "gsurg/int8_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <cpu.h>

#include "int8_kernel_rows.hpp"
#include "gsurg/huge_pages.hpp"

namespace gsurg::int8k {

#if GSURG_INT8_AVX512 || GSURG_INT8_AVX2
namespace detail {
void reciprocals_avx512(const float* x, float* out);
void gemm_avx512vnni(const Int8Weights& w, const float* a, size_t a_stride, int M, float alpha, float* out,
                     size_t out_stride, int threads, Descale descale);
void reciprocals_avx2(const float* x, float* out);
void gemm_avx2(const Int8Weights& w, const float* a, size_t a_stride, int M, float alpha, float* out,
               size_t out_stride, int threads, Descale descale, RowForms rows);
}  // namespace detail
#endif

namespace {

bool vnni_runs() {
#if GSURG_INT8_AVX512
  return ncnn::cpu_support_x86_avx512() && ncnn::cpu_support_x86_avx512_vnni();
#else
  return false;
#endif
}

bool avx2_runs() {
#if GSURG_INT8_AVX2
  return ncnn::cpu_support_x86_avx2() && ncnn::cpu_support_x86_fma();
#else
  return false;
#endif
}

}  // namespace

bool available() { return vnni_runs() || avx2_runs(); }

const char* kernel_name() { return vnni_runs() ? "avx512-vnni" : avx2_runs() ? "avx2" : "none"; }

bool packable(int block, int K) {
  return (block == 32 || block == 64 || block == 128) && K > 0 && K % block == 0;
}

namespace {

// 16 descales 1 / x as ncnn's x86 pack computes them for its 8-column (AVX-512 build) or 4-column (AVX2
// build) groups: an approximate reciprocal and one Newton step, GCC's vectorised 1.f / x under -ffast-math,
// the same per lane either way; or by division where the kernel cannot run.
void reciprocals(const float* x, float* out) {
#if GSURG_INT8_AVX512
  if (vnni_runs()) {
    detail::reciprocals_avx512(x, out);
    return;
  }
#endif
#if GSURG_INT8_AVX2
  if (avx2_runs()) {
    detail::reciprocals_avx2(x, out);
    return;
  }
#endif
  for (int lane = 0; lane < kLanes; ++lane) out[lane] = 1.f / x[lane];
}

}  // namespace

Int8Weights pack_codes(int block, int K, int N, const signed char* rows, int threads) {
  Int8Weights w;
  w.block = block;
  w.K = K;
  w.N = N;
  w.groups = (N + kLanes - 1) / kLanes;
  const int blocks = K / block;
  w.group_bytes = detail::record_bytes(block) * static_cast<size_t>(blocks);
  w.data.reset(new unsigned char[w.group_bytes * static_cast<size_t>(w.groups)]);
  huge_pages::advise(w.data.get(), w.group_bytes * static_cast<size_t>(w.groups));  // before the first touch
  int min_code = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : min_code)
  for (int g = 0; g < w.groups; ++g) {
    for (int b = 0; b < blocks; ++b) {
      unsigned char* rec = w.data.get() + w.group_bytes * g + detail::record_bytes(block) * b;
      int32_t corr[kLanes] = {};
      for (int lane = 0; lane < kLanes; ++lane) {
        const int j = g * kLanes + lane;
        if (j >= N) {  // padding: zero codes, zero correction (and, in attach_scales, zero descale)
          for (int s = 0; s < block / 4; ++s)
            std::memset(rec + (static_cast<size_t>(s) * kLanes + lane) * 4, 0, 4);
          continue;
        }
        const signed char* src = rows + static_cast<size_t>(j) * K + static_cast<size_t>(b) * block;
        for (int s = 0; s < block / 4; ++s) {
          std::memcpy(rec + (static_cast<size_t>(s) * kLanes + lane) * 4, src + 4 * s, 4);
          for (int t = 0; t < 4; ++t) {
            corr[lane] += src[4 * s + t];
            if (src[4 * s + t] == -128) min_code = 1;
          }
        }
        corr[lane] *= 128;
      }
      std::memcpy(rec + static_cast<size_t>(block) * kLanes, corr, sizeof corr);
    }
  }
  w.has_min_code = min_code != 0;
  return w;
}

void attach_scales(Int8Weights& w, const float* scales, const float* input_scales) {
  const int blocks = w.K / w.block;
  // ncnn's pack divides for the last N % 4 columns (its 2- and 1-column groups) and takes the approximate
  // reciprocal for the 8- and 4-column groups before them.
  const int approximated = w.N - w.N % 4;
  std::vector<float> column(static_cast<size_t>(kLanes));
  for (int g = 0; g < w.groups; ++g) {
    for (int b = 0; b < blocks; ++b) {
      for (int lane = 0; lane < kLanes; ++lane) {
        const int j = g * kLanes + lane;
        column[lane] = j < w.N ? scales[static_cast<size_t>(j) * blocks + b] : 1.f;
      }
      float descale[kLanes];
      reciprocals(column.data(), descale);
      for (int lane = 0; lane < kLanes; ++lane) {
        const int j = g * kLanes + lane;
        if (j >= w.N) descale[lane] = 0.f;  // padding lanes
        else if (j >= approximated) descale[lane] = 1.f / column[lane];
      }
      unsigned char* rec = w.data.get() + w.group_bytes * g + detail::record_bytes(w.block) * b;
      std::memcpy(rec + static_cast<size_t>(w.block) * kLanes + sizeof(int32_t) * kLanes, descale,
                  sizeof descale);
    }
  }
  if (input_scales != nullptr) w.input_scales.assign(input_scales, input_scales + w.K);
}

namespace {

// The steps of ncnn's get_optimal_tile_mnk_wq_int8 that decide TILE_M in its __AVX__ build, with its float
// arithmetic (TILE_N and the constant TILE_N / TILE_K do not reach TILE_M).
int ncnn_avx_tile_m(int M, int K, int block, int constant_tile_m, int nt) {
  const size_t l2 = static_cast<size_t>(ncnn::get_cpu_level2_cache_size());
  if (nt == 0) nt = ncnn::get_physical_big_cpu_count();
  int tile_size = static_cast<int>(std::sqrt(static_cast<float>(l2) / static_cast<float>(2 * sizeof(signed char) +
                                                                                          sizeof(float))));
  int tile_m = std::max(8, tile_size / 8 * 8);
  int tile_k = std::max(block, tile_size / block * block);
  if (K > 0) {
    const int nn_k = (K + tile_k - 1) / tile_k;
    tile_k = std::min(K, ((K + nn_k - 1) / nn_k + block - 1) / block * block);
    if (nn_k == 1) {
      tile_size = std::max(1, static_cast<int>(static_cast<float>(l2) / 2 / static_cast<float>(sizeof(signed char)) /
                                               static_cast<float>(tile_k)));
      tile_m = std::max(8, tile_size / 8 * 8);
    }
  }
  tile_m *= std::min(nt, ncnn::get_physical_cpu_count());
  if (M > 0) {
    const int nn_m = (M + tile_m - 1) / tile_m;
    tile_m = std::min(tile_m, ((M + nn_m - 1) / nn_m + 7) / 8 * 8);
  }
  if (nt > 1) tile_m = std::min(tile_m, (std::max(1, tile_m / nt) + 7) / 8 * 8);
  if (constant_tile_m > 0) tile_m = (constant_tile_m + 7) / 8 * 8;
  return tile_m;
}

}  // namespace

RowForms ncnn_row_forms(int M, int K, int block, int constant_tile_m, int nt) {
  RowForms rows;
  if (!vnni_runs() && avx2_runs() && !ncnn::cpu_support_x86_avx512())
    rows.tile_m = ncnn_avx_tile_m(M, K, block, constant_tile_m, nt);
  return rows;
}

void gemm(const Int8Weights& w, const float* a, size_t a_stride, int M, float alpha, float* out,
          size_t out_stride, int threads, Descale descale, RowForms rows) {
#if GSURG_INT8_AVX512
  if (vnni_runs()) {
    detail::gemm_avx512vnni(w, a, a_stride, M, alpha, out, out_stride, threads, descale);
    return;
  }
#endif
#if GSURG_INT8_AVX2
  detail::gemm_avx2(w, a, a_stride, M, alpha, out, out_stride, threads, descale, rows);
#else
  (void)w, (void)a, (void)a_stride, (void)M, (void)alpha, (void)out, (void)out_stride, (void)threads;
  (void)descale, (void)rows;
#endif
}

}  // namespace gsurg::int8k
