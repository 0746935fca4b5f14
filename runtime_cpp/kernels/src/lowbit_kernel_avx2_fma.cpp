// lowbit_kernel.hpp's loop in AVX2 with fused rounding, and the portable lanes (8 and 16 wide) with fused
// rounding: compiled with -mavx2 -mfma, run only where the CPU reports AVX2 and FMA (lowbit_kernel.cpp decides).
#include "lowbit_kernel_avx2.hpp"
#include "lowbit_kernel_scalar.hpp"
#include "lowbit_kernel_tiles.hpp"

#if !defined(__FMA__)
#error "lowbit_kernel_avx2_fma.cpp must be compiled with -mfma"
#endif

namespace gsurg::lowbit::detail {

void gemm_avx2_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                   float alpha, float* out, size_t out_stride, int threads) {
  run<Avx2<true>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

void gemm_scalar_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                     float alpha, float* out, size_t out_stride, int threads) {
  run<Scalar<true>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

void gemm_scalar_wide_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                          float alpha, float* out, size_t out_stride, int threads) {
  run<Scalar<true, 2>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

}  // namespace gsurg::lowbit::detail
