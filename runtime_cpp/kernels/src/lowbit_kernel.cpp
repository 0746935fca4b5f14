// lowbit_kernel.hpp: the packing, the portable and NEON instances of the loop, and the choice among them
// (the AVX2 and AVX-512 instances are in files of their own, built for those instruction sets).
#include "gsurg/lowbit_kernel.hpp"

#include <cpu.h>

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "lowbit_kernel_scalar.hpp"
#include "lowbit_kernel_tiles.hpp"

namespace gsurg::lowbit {

namespace detail {

#if GSURG_LOWBIT_AVX512
void gemm_avx512(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
                 float* out, size_t out_stride, int threads);
void gemm_avx512_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                     float alpha, float* out, size_t out_stride, int threads);
#endif
#if GSURG_LOWBIT_AVX2
void gemm_avx2(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
               float* out, size_t out_stride, int threads);
void gemm_avx2_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                   float alpha, float* out, size_t out_stride, int threads);
void gemm_scalar_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                     float alpha, float* out, size_t out_stride, int threads);
void gemm_scalar_wide_fma(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias,
                          float alpha, float* out, size_t out_stride, int threads);
#endif

namespace {

#if defined(__aarch64__)
template <bool kFused>
struct Neon {
  static constexpr int kSpan = 1;
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
  static F load_groups(const float* p, size_t) { return load(p); }
  static F set1(float s) { return {vdupq_n_f32(s), vdupq_n_f32(s)}; }
  static I load_group_words(const uint32_t* p, size_t) {
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
  static F madd(F acc, F v, F w) {
    if (kFused) return {vfmaq_f32(acc.lo, v.lo, w.lo), vfmaq_f32(acc.hi, v.hi, w.hi)};
    return {vaddq_f32(acc.lo, vmulq_f32(v.lo, w.lo)), vaddq_f32(acc.hi, vmulq_f32(v.hi, w.hi))};
  }
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
  w.stored_groups = (w.groups + 1) / 2 * 2;
  w.chunk_k = bits == 4 ? 8 : 16;
  w.chunk_words = bits * w.chunk_k / 32;
  const size_t row_bytes = static_cast<size_t>(K) * bits / 8;  // whole words: K is a multiple of chunk_k
  const size_t row_words = row_bytes / 4;
  w.words.assign(static_cast<size_t>(w.stored_groups) * row_words * kLanes, 0u);
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
  w.descales.assign(static_cast<size_t>(w.stored_groups) * nblocks * kLanes, 1.f);
  for (int j = 0; j < w.N; ++j) {
    float* dst = w.descales.data() + static_cast<size_t>(j / kLanes) * nblocks * kLanes + j % kLanes;
    for (int blk = 0; blk < nblocks; ++blk)
      dst[static_cast<size_t>(blk) * kLanes] = 1.f / scales[static_cast<size_t>(j) * nblocks + blk];
  }
  if (input_scales) w.input_scales.assign(input_scales, input_scales + w.K);
  else w.input_scales.clear();
}

namespace {

// Where the AVX2 instances can run: AVX2 for the separate rounding, AVX2 and FMA for the fused one.
bool avx2_runs(Rounding rounding) {
#if GSURG_LOWBIT_AVX2
  return ncnn::cpu_support_x86_avx2() && (rounding == Rounding::kSeparate || ncnn::cpu_support_x86_fma());
#else
  (void)rounding;
  return false;
#endif
}

// Where the AVX-512 instances can run: AVX-512F has the fused multiply-add itself.
bool avx512_runs() {
#if GSURG_LOWBIT_AVX512
  return ncnn::cpu_support_x86_avx512() != 0;
#else
  return false;
#endif
}

}  // namespace

const char* kernel_name(Rounding rounding, Kernel kernel) {
  const bool fused = rounding == Rounding::kFused;
  if (kernel == Kernel::kBest && avx512_runs()) return fused ? "avx512+fma" : "avx512";
  if (kernel == Kernel::kScalarWide) return "scalar x16";
  if (kernel != Kernel::kScalar) {
    if (avx2_runs(rounding)) return fused ? "avx2+fma" : "avx2";
#if defined(__aarch64__)
    return "neon";
#endif
  }
  return "scalar";
}

void gemm(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
          float* out, size_t out_stride, int threads, Rounding rounding, Kernel kernel) {
  const bool fused = rounding == Rounding::kFused;
#if GSURG_LOWBIT_AVX512
  if (kernel == Kernel::kBest && avx512_runs()) {
    if (fused) detail::gemm_avx512_fma(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    else detail::gemm_avx512(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    return;
  }
#endif
  const bool wide = kernel == Kernel::kScalarWide;
  if (kernel != Kernel::kScalar && !wide) {
#if GSURG_LOWBIT_AVX2
    if (avx2_runs(rounding)) {
      if (fused) detail::gemm_avx2_fma(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
      else detail::gemm_avx2(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
      return;
    }
#endif
#if defined(__aarch64__)
    if (fused) detail::run<detail::Neon<true>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    else detail::run<detail::Neon<false>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    return;
#endif
  }
#if GSURG_LOWBIT_AVX2
  // The fused portable lanes where the CPU has FMA, so std::fma is the instruction: some C libraries'
  // fmaf (mingw-w64's) does not round once.
  if (fused && ncnn::cpu_support_x86_fma()) {
    if (wide) detail::gemm_scalar_wide_fma(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    else detail::gemm_scalar_fma(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    return;
  }
#endif
  if (wide) {
    if (fused) detail::run<detail::Scalar<true, 2>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    else detail::run<detail::Scalar<false, 2>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
    return;
  }
  if (fused) detail::run<detail::Scalar<true>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
  else detail::run<detail::Scalar<false>>(w, a, a_stride, M, bias, alpha, out, out_stride, threads);
}

}  // namespace gsurg::lowbit
