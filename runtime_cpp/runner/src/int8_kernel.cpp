// The 8-bit kernel's layout and dispatch (int8_kernel.hpp); the arithmetic is in int8_kernel_avx512.cpp.
#include "pvl/int8_kernel.hpp"

#include <cstring>
#include <vector>

#include <cpu.h>

namespace pvl::int8k {

#if PVL_INT8_AVX512
namespace detail {
void reciprocals_avx512(const float* x, float* out);
void gemm_avx512vnni(const Int8Weights& w, const float* a, size_t a_stride, int M, float* out,
                     size_t out_stride, int threads, Descale descale);
}  // namespace detail
#endif

bool available() {
#if PVL_INT8_AVX512
  return ncnn::cpu_support_x86_avx512() && ncnn::cpu_support_x86_avx512_vnni();
#else
  return false;
#endif
}

bool packable(int block, int K) {
  return (block == 32 || block == 64 || block == 128) && K > 0 && K % block == 0;
}

namespace {

// The byte offsets of one (group, block) record: codes, then corrections, then descales.
size_t record_bytes(int block) { return static_cast<size_t>(block) * kLanes + 2 * sizeof(int32_t) * kLanes; }

// 16 descales 1 / x as ncnn's x86 pack computes them for its 8-column groups (an approximate reciprocal and
// one Newton step: GCC's vectorised 1.f / x under -ffast-math), or by division where the kernel cannot run.
void reciprocals(const float* x, float* out) {
#if PVL_INT8_AVX512
  if (available()) {
    detail::reciprocals_avx512(x, out);
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
  w.group_bytes = record_bytes(block) * static_cast<size_t>(blocks);
  w.data.reset(new unsigned char[w.group_bytes * static_cast<size_t>(w.groups)]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    for (int b = 0; b < blocks; ++b) {
      unsigned char* rec = w.data.get() + w.group_bytes * g + record_bytes(block) * b;
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
          for (int t = 0; t < 4; ++t) corr[lane] += src[4 * s + t];
        }
        corr[lane] *= 128;
      }
      std::memcpy(rec + static_cast<size_t>(block) * kLanes, corr, sizeof corr);
    }
  }
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
      unsigned char* rec = w.data.get() + w.group_bytes * g + record_bytes(w.block) * b;
      std::memcpy(rec + static_cast<size_t>(w.block) * kLanes + sizeof(int32_t) * kLanes, descale,
                  sizeof descale);
    }
  }
  if (input_scales != nullptr) w.input_scales.assign(input_scales, input_scales + w.K);
}

void gemm(const Int8Weights& w, const float* a, size_t a_stride, int M, float* out, size_t out_stride,
          int threads, Descale descale) {
#if PVL_INT8_AVX512
  detail::gemm_avx512vnni(w, a, a_stride, M, out, out_stride, threads, descale);
#else
  (void)w, (void)a, (void)a_stride, (void)M, (void)out, (void)out_stride, (void)threads, (void)descale;
#endif
}

}  // namespace pvl::int8k
