// lowbit_kernel.hpp: the packing, the portable and NEON instances of the loop, and the choice among them.
#include "pvl/lowbit_kernel.hpp"

#include <cmath>

#include <cpu.h>

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "lowbit_kernel_tiles.hpp"

namespace pvl::lowbit {

namespace detail {

#if PVL_LOWBIT_AVX2
void gemm_avx2(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
               float* out, size_t out_stride, int threads);
#endif

namespace {

// ncnn's base Gemm is compiled with `sum += v * w` contracted into one fused multiply-add on aarch64 (GCC's
// default -ffp-contract=fast, Clang's =on, and the instruction always there), and left as a multiply then
// an add on x86, whose baseline has no FMA. The kernel rounds as that build does.
#if defined(__aarch64__)
constexpr bool kFusedMadd = true;
#else
constexpr bool kFusedMadd = false;
#endif

struct Scalar {
  struct F {
    float v[kLanes];
  };
  struct I {
    int32_t v[kLanes];
  };
  static F load(const float* p) {
    F x;
    for (int l = 0; l < kLanes; ++l) x.v[l] = p[l];
    return x;
  }
  static void store(float* p, const F& x) {
    for (int l = 0; l < kLanes; ++l) p[l] = x.v[l];
  }
  static F set1(float s) {
    F x;
    for (float& e : x.v) e = s;
    return x;
  }
  static I load_words(const uint32_t* p) {
    I x;
    for (int l = 0; l < kLanes; ++l) x.v[l] = static_cast<int32_t>(p[l]);
    return x;
  }
  // Shifts on the unsigned bits (a left shift of a negative int is undefined before C++20); sra relies on
  // >> of a negative int32 being arithmetic, as every compiler this builds with makes it.
  static I shl(const I& x, int n) {
    I y;
    for (int l = 0; l < kLanes; ++l) y.v[l] = static_cast<int32_t>(static_cast<uint32_t>(x.v[l]) << n);
    return y;
  }
  static I sra(const I& x, int n) {
    I y;
    for (int l = 0; l < kLanes; ++l) y.v[l] = x.v[l] >> n;
    return y;
  }
  static I shr(const I& x, int n) {
    I y;
    for (int l = 0; l < kLanes; ++l) y.v[l] = static_cast<int32_t>(static_cast<uint32_t>(x.v[l]) >> n);
    return y;
  }
  static I bor(const I& x, const I& y) {
    I z;
    for (int l = 0; l < kLanes; ++l) z.v[l] = x.v[l] | y.v[l];
    return z;
  }
  static F to_float(const I& x) {
    F y;
    for (int l = 0; l < kLanes; ++l) y.v[l] = static_cast<float>(x.v[l]);
    return y;
  }
  static F mul(const F& x, const F& y) {
    F z;
    for (int l = 0; l < kLanes; ++l) z.v[l] = x.v[l] * y.v[l];
    return z;
  }
  static F madd(const F& acc, const F& v, const F& w) {
    F z;
    for (int l = 0; l < kLanes; ++l)
      z.v[l] = kFusedMadd ? std::fma(v.v[l], w.v[l], acc.v[l]) : acc.v[l] + v.v[l] * w.v[l];
    return z;
  }
};

#if defined(__aarch64__)
struct Neon {
  struct F {
    float32x4_t lo, hi;
  };
  struct I {
    int32x4_t lo, hi;
  };
  static F load(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
  static void store(float* p, F x) {
    vst1q_f32(p, x.lo);
    vst1q_f32(p + 4, x.hi);
  }
  static F set1(float s) { return {vdupq_n_f32(s), vdupq_n_f32(s)}; }
  static I load_words(const uint32_t* p) {
    return {vreinterpretq_s32_u32(vld1q_u32(p)), vreinterpretq_s32_u32(vld1q_u32(p + 4))};
  }
  static int32x4_t srl4(int32x4_t x, int n) {
    return vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(x), vdupq_n_s32(-n)));
  }
  static I shl(I x, int n) { return {vshlq_s32(x.lo, vdupq_n_s32(n)), vshlq_s32(x.hi, vdupq_n_s32(n))}; }
  static I sra(I x, int n) { return {vshlq_s32(x.lo, vdupq_n_s32(-n)), vshlq_s32(x.hi, vdupq_n_s32(-n))}; }
  static I shr(I x, int n) { return {srl4(x.lo, n), srl4(x.hi, n)}; }
  static I bor(I x, I y) { return {vorrq_s32(x.lo, y.lo), vorrq_s32(x.hi, y.hi)}; }
  static F to_float(I x) { return {vcvtq_f32_s32(x.lo), vcvtq_f32_s32(x.hi)}; }
  static F mul(F x, F y) { return {vmulq_f32(x.lo, y.lo), vmulq_f32(x.hi, y.hi)}; }
  static F madd(F acc, F v, F w) { return {vfmaq_f32(acc.lo, v.lo, w.lo), vfmaq_f32(acc.hi, v.hi, w.hi)}; }
};
#endif

}  // namespace

}  // namespace detail

bool packable(int bits, int block, int K) {
  if (bits != 4 && bits != 6) return false;
  if (block != 32 && block != 64 && block != 128) return false;
  const int chunk = bits == 4 ? 8 : 16;
  return K > 0 && K % chunk == 0;
}

PackedWeights pack_codes(int bits, int block, int K, int N, const unsigned char* rows) {
  PackedWeights w;
  w.bits = bits;
  w.block = block;
  w.K = K;
  w.N = N;
  w.groups = (N + kLanes - 1) / kLanes;
  w.chunk_k = bits == 4 ? 8 : 16;
  w.chunk_words = bits * w.chunk_k / 32;
  const size_t row_bytes = static_cast<size_t>(K) * bits / 8;  // whole words: K is a multiple of chunk_k
  const size_t row_words = row_bytes / 4;
  w.words.assign(static_cast<size_t>(w.groups) * row_words * kLanes, 0u);
  for (int g = 0; g < w.groups; ++g) {
    uint32_t* dst = w.words.data() + static_cast<size_t>(g) * row_words * kLanes;
    for (int l = 0; l < kLanes; ++l) {
      const int j = g * kLanes + l;
      if (j >= N) break;
      const unsigned char* row = rows + static_cast<size_t>(j) * row_bytes;
      // Word c*chunk_words + wi of the row (little-endian, as ncnn's bit stream reads it) to
      // [chunk c][word wi][lane l]: the row's word order is the layout's chunk-major order.
      for (size_t rw = 0; rw < row_words; ++rw) {
        const unsigned char* b = row + 4 * rw;
        dst[rw * kLanes + l] = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
                               static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
      }
    }
  }
  return w;
}

void attach_scales(PackedWeights& w, const float* scales, const float* input_scales) {
  const int nblocks = (w.K + w.block - 1) / w.block;
  w.descales.assign(static_cast<size_t>(w.groups) * nblocks * kLanes, 1.f);
  for (int j = 0; j < w.N; ++j) {
    float* dst = w.descales.data() + static_cast<size_t>(j / kLanes) * nblocks * kLanes + j % kLanes;
    for (int blk = 0; blk < nblocks; ++blk)
      dst[static_cast<size_t>(blk) * kLanes] = 1.f / scales[static_cast<size_t>(j) * nblocks + blk];
  }
  if (input_scales) w.input_scales.assign(input_scales, input_scales + w.K);
  else w.input_scales.clear();
}

const char* kernel_name(Kernel kernel) {
  if (kernel == Kernel::kBest) {
#if PVL_LOWBIT_AVX2
    if (ncnn::cpu_support_x86_avx2()) return "avx2";
#endif
#if defined(__aarch64__)
    return "neon";
#endif
  }
  return "scalar";
}

void gemm(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
          float* out, size_t out_stride, int threads, Kernel kernel) {
  if (kernel == Kernel::kBest) {
#if PVL_LOWBIT_AVX2
    if (ncnn::cpu_support_x86_avx2()) {
      detail::gemm_avx2(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
      return;
    }
#endif
#if defined(__aarch64__)
    detail::run<detail::Neon>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    return;
#endif
  }
  detail::run<detail::Scalar>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

}  // namespace pvl::lowbit
