// lowbit_kernel.hpp's loop in AVX2 with separate rounding: compiled with -mavx2 (no FMA), run only where
// the CPU reports AVX2 (lowbit_kernel.cpp decides).
#include "lowbit_kernel_avx2.hpp"
#include "lowbit_kernel_tiles.hpp"

namespace gsurg::lowbit::detail {

void gemm_avx2(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
               float* out, size_t out_stride, int threads) {
  run<Avx2<false>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

}  // namespace gsurg::lowbit::detail
