// The SIMD instances of the w4a8 kernel (w4a8_kernel.hpp), each in a file built for its instruction set;
// included by those files and by w4a8_kernel.cpp, which chooses among them.
// Each computes out[i][j] = fsum of the contract for all M rows and N columns (no bias, no alpha: the
// dispatcher adds those), from the input as quantize_input() left it.
#pragma once

#include <cstddef>

#include "gsurg/w4a8_kernel.hpp"

namespace gsurg::w4a8::detail {

#if GSURG_W4A8_AVX512
void gemm_avx512vnni(const Weights& w, const QuantizedInput& in, float* out, size_t out_stride, int threads);
#endif
#if GSURG_W4A8_AVX2
void gemm_avx2(const Weights& w, const QuantizedInput& in, float* out, size_t out_stride, int threads);
#endif

}  // namespace gsurg::w4a8::detail
