// The steps of ncnn's x86 8-bit kernel that quantize a row of A (int8_kernel.hpp), shared by the AVX-512
// VNNI and the AVX2 instances. Included only by int8_kernel_avx512.cpp and int8_kernel_avx2.cpp, each
// built with -ffp-contract=off and its own instruction set: internal to each file that includes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "gsurg/int8_kernel.hpp"

namespace gsurg::int8k::detail {

namespace {

// Bytes of one (group, block) record of the layout: codes, corrections, descales.
inline size_t record_bytes(int block) {
  return static_cast<size_t>(block) * kLanes + 2 * sizeof(int32_t) * kLanes;
}

// max |v[k]| (times s[k] with an input scale s) over one block: ncnn's absmax, exact in any order.
inline float block_absmax(const float* v, const float* s, int k0, int block) {
  float absmax = 0.f;
  for (int k = k0; k < k0 + block; ++k) absmax = std::max(absmax, s ? std::fabs(v[k]) * s[k] : std::fabs(v[k]));
  return absmax;
}

// The block's input descale in the form this ncnn computes it (int8_descale measures which).
inline float input_descale(float absmax, Descale descale) {
  return descale == Descale::kDivide ? absmax / 127.f : absmax * (1.f / 127.f);
}

// One scaled value to its code as ncnn's float2int8 does it: add +-0.5, truncate, clamp to [-127, 127].
inline int code_of(float t) {
  const int i = static_cast<int>(t + std::copysign(0.5f, t));  // truncation, as cvttps
  return std::min(127, std::max(-127, i));
}

}  // namespace

}  // namespace gsurg::int8k::detail
