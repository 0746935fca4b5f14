// w4a8_kernel.hpp: the layout, the input quantization every instance shares, the portable and NEON
// instances, the bias, and the choice among instances (AVX-512 VNNI and AVX2 are in files of their own,
// built for those instruction sets). Built with -ffp-contract=off: the contract's float steps are separate
// roundings.
#include "gsurg/w4a8_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <cpu.h>

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "gsurg/huge_pages.hpp"
#include "w4a8_kernel_instances.hpp"

namespace gsurg::w4a8 {

namespace {

bool vnni_runs() {
#if GSURG_W4A8_AVX512
  return ncnn::cpu_support_x86_avx512() && ncnn::cpu_support_x86_avx512_vnni();
#else
  return false;
#endif
}

bool avx2_runs() {
#if GSURG_W4A8_AVX2
  return ncnn::cpu_support_x86_avx2() != 0;
#else
  return false;
#endif
}

constexpr bool kNeon =
#if defined(__aarch64__)
    true;
#else
    false;
#endif

// What an instance choice runs here, resolved: 0 portable, 1 AVX2, 2 AVX-512 VNNI, 3 NEON.
int resolve(Instance instance) {
  if (instance == Instance::kScalar) return 0;
  if (instance == Instance::kBest && vnni_runs()) return 2;
  if (avx2_runs()) return 1;
  if (kNeon) return 3;
  return 0;
}

}  // namespace

bool accelerated() { return resolve(Instance::kBest) != 0; }

const char* instance_name(Instance instance) {
  switch (resolve(instance)) {
    case 1: return "avx2";
    case 2: return "avx512-vnni";
    case 3: return "neon";
    default: return "scalar";
  }
}

bool packable(int block, int K) {
  return (block == 32 || block == 64 || block == 128) && K > 0 && K % block == 0;
}

Weights pack_codes(int block, int K, int N, const unsigned char* rows, int threads) {
  Weights w;
  w.block = block;
  w.K = K;
  w.N = N;
  w.groups = (N + kLanes - 1) / kLanes;
  const int blocks = K / block;
  const size_t rec_bytes = record_bytes(block);
  w.group_bytes = rec_bytes * static_cast<size_t>(blocks);
  const size_t total = w.group_bytes * static_cast<size_t>(w.groups);
  w.data.reset(new unsigned char[total]);
  huge_pages::advise(w.data.get(), total);  // before the first touch
  const size_t row_bytes = static_cast<size_t>(K) / 2;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    for (int b = 0; b < blocks; ++b) {
      unsigned char* rec = w.data.get() + w.group_bytes * g + rec_bytes * b;
      for (int lane = 0; lane < kLanes; ++lane) {
        const int j = g * kLanes + lane;
        for (int c = 0; c < block / 8; ++c) {
          unsigned char* dst = rec + (static_cast<size_t>(c) * kLanes + lane) * 4;
          if (j >= N) {  // padding: code 0, stored as 8 in both nibbles
            std::memset(dst, 0x88, 4);
            continue;
          }
          // Codes k0 .. k0 + 7 of row j: bytes k0 / 2 .. k0 / 2 + 3, two nibbles each, low first.
          const unsigned char* src = rows + static_cast<size_t>(j) * row_bytes + (static_cast<size_t>(b) * block +
                                                                                   8 * static_cast<size_t>(c)) / 2;
          unsigned char nib[8];
          for (int t = 0; t < 4; ++t) {
            nib[2 * t] = static_cast<unsigned char>(src[t] & 0x0f);
            nib[2 * t + 1] = static_cast<unsigned char>(src[t] >> 4);
          }
          // c + 8 for a two's complement nibble is the nibble with its top bit flipped.
          for (int t = 0; t < 4; ++t)
            dst[t] = static_cast<unsigned char>((nib[t] ^ 8) | (nib[4 + t] ^ 8) << 4);
        }
      }
    }
  }
  return w;
}

void attach_scales(Weights& w, const float* scales, const float* input_scales) {
  const int blocks = w.K / w.block;
  const size_t rec_bytes = record_bytes(w.block);
  for (int g = 0; g < w.groups; ++g) {
    for (int b = 0; b < blocks; ++b) {
      float descale[kLanes];
      for (int lane = 0; lane < kLanes; ++lane) {
        const int j = g * kLanes + lane;
        descale[lane] = j < w.N ? 1.f / scales[static_cast<size_t>(j) * blocks + b] : 0.f;
      }
      unsigned char* rec = w.data.get() + w.group_bytes * g + rec_bytes * b;
      std::memcpy(rec + static_cast<size_t>(w.block) / 2 * kLanes, descale, sizeof descale);
    }
  }
  if (input_scales != nullptr) w.input_scales.assign(input_scales, input_scales + w.K);
  else w.input_scales.clear();
}

QuantizedInput quantize_input(const Weights& w, const float* a, size_t a_stride, int M, int threads) {
  QuantizedInput in;
  in.M = M;
  in.K = w.K;
  in.blocks = w.K / w.block;
  in.q.resize(static_cast<size_t>(M) * w.K);
  in.descale.resize(static_cast<size_t>(M) * in.blocks);
  in.correction.resize(static_cast<size_t>(M) * in.blocks);
  const float* ps = w.input_scales.empty() ? nullptr : w.input_scales.data();
#pragma omp parallel for num_threads(threads) schedule(static) if (M > 1)
  for (int i = 0; i < M; ++i) {
    const float* v = a + static_cast<size_t>(i) * a_stride;
    signed char* q = in.q.data() + static_cast<size_t>(i) * w.K;
    for (int b = 0; b < in.blocks; ++b) {
      const int k0 = b * w.block;
      float absmax = 0.f;
      for (int k = k0; k < k0 + w.block; ++k) absmax = std::max(absmax, std::fabs(ps ? v[k] * ps[k] : v[k]));
      const float scale = absmax != 0.f ? 127.f / absmax : 0.f;
      int32_t sum = 0;
      for (int k = k0; k < k0 + w.block; ++k) {
        const float t = (ps ? v[k] * ps[k] : v[k]) * scale;
        const int code = std::min(127, std::max(-127, static_cast<int>(t + std::copysign(0.5f, t))));
        q[k] = static_cast<signed char>(code);
        sum += code;
      }
      in.descale[static_cast<size_t>(i) * in.blocks + b] = absmax / 127.f;
      in.correction[static_cast<size_t>(i) * in.blocks + b] = 8 * sum;
    }
  }
  return in;
}

namespace {

// The portable instance: the contract read straight off the layout, one output at a time.
void gemm_scalar(const Weights& w, const QuantizedInput& in, float* out, size_t out_stride, int threads) {
  const size_t rec_bytes = record_bytes(w.block);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    const unsigned char* group = w.data.get() + w.group_bytes * g;
    const int lanes = std::min(kLanes, w.N - g * kLanes);
    for (int i = 0; i < in.M; ++i) {
      const signed char* q = in.q.data() + static_cast<size_t>(i) * w.K;
      for (int lane = 0; lane < lanes; ++lane) {
        float fsum = 0.f;
        for (int b = 0; b < in.blocks; ++b) {
          const unsigned char* rec = group + rec_bytes * b;
          const signed char* qb = q + static_cast<size_t>(b) * w.block;
          int32_t isum = 0;
          for (int c = 0; c < w.block / 8; ++c) {
            const unsigned char* bytes = rec + (static_cast<size_t>(c) * kLanes + lane) * 4;
            for (int t = 0; t < 4; ++t) {
              isum += (bytes[t] & 0x0f) * qb[8 * c + t];
              isum += (bytes[t] >> 4) * qb[8 * c + 4 + t];
            }
          }
          isum -= in.correction[static_cast<size_t>(i) * in.blocks + b];
          float descale_w;
          std::memcpy(&descale_w, rec + static_cast<size_t>(w.block) / 2 * kLanes + 4 * lane, 4);
          const float d = in.descale[static_cast<size_t>(i) * in.blocks + b] * descale_w;
          fsum = fsum + static_cast<float>(isum) * d;
        }
        out[static_cast<size_t>(i) * out_stride + static_cast<size_t>(g) * kLanes + lane] = fsum;
      }
    }
  }
}

#if defined(__aarch64__)
// The NEON instance (baseline ARMv8, no dot-product extension): per 4 lanes of a chunk, widening byte
// multiplies (vmull_s8: the codes + 8 are 0..15, valid signed bytes), the low and high nibbles' products
// added (|x| <= 2 * 15 * 127), adjacent pairs added (<= 4 * 15 * 127, still 16 bits), then the pairs
// accumulated into 32 bits (vpadalq_s16), which leaves each lane's four-k sum in its own 32-bit lane.
void gemm_neon(const Weights& w, const QuantizedInput& in, float* out, size_t out_stride, int threads) {
  const size_t rec_bytes = record_bytes(w.block);
  const int chunks = w.block / 8;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int g = 0; g < w.groups; ++g) {
    const unsigned char* group = w.data.get() + w.group_bytes * g;
    const int lanes = std::min(kLanes, w.N - g * kLanes);
    const uint8x16_t low4 = vdupq_n_u8(0x0f);
    for (int i = 0; i < in.M; ++i) {
      const signed char* q = in.q.data() + static_cast<size_t>(i) * w.K;
      float32x4_t fsum[4];
      for (int h = 0; h < 4; ++h) fsum[h] = vdupq_n_f32(0.f);
      for (int b = 0; b < in.blocks; ++b) {
        const unsigned char* rec = group + rec_bytes * b;
        const signed char* qb = q + static_cast<size_t>(b) * w.block;
        int32x4_t acc[4];
        for (int h = 0; h < 4; ++h) acc[h] = vdupq_n_s32(0);
        for (int c = 0; c < chunks; ++c) {
          int32_t a0, a1;
          std::memcpy(&a0, qb + 8 * c, 4);
          std::memcpy(&a1, qb + 8 * c + 4, 4);
          const int8x16_t av0 = vreinterpretq_s8_s32(vdupq_n_s32(a0));
          const int8x16_t av1 = vreinterpretq_s8_s32(vdupq_n_s32(a1));
          for (int h = 0; h < 4; ++h) {
            const uint8x16_t bytes = vld1q_u8(rec + static_cast<size_t>(c) * 64 + 16 * h);
            const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(bytes, low4));
            const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4));
            const int16x8_t p0 = vaddq_s16(vmull_s8(vget_low_s8(lo), vget_low_s8(av0)),
                                           vmull_s8(vget_low_s8(hi), vget_low_s8(av1)));
            const int16x8_t p1 = vaddq_s16(vmull_high_s8(lo, av0), vmull_high_s8(hi, av1));
            acc[h] = vpadalq_s16(acc[h], vpaddq_s16(p0, p1));
          }
        }
        const int32x4_t corr = vdupq_n_s32(in.correction[static_cast<size_t>(i) * in.blocks + b]);
        const float32x4_t da = vdupq_n_f32(in.descale[static_cast<size_t>(i) * in.blocks + b]);
        const float* dw = reinterpret_cast<const float*>(rec + static_cast<size_t>(w.block) / 2 * kLanes);
        for (int h = 0; h < 4; ++h) {
          const float32x4_t d = vmulq_f32(da, vld1q_f32(dw + 4 * h));
          fsum[h] = vaddq_f32(fsum[h], vmulq_f32(vcvtq_f32_s32(vsubq_s32(acc[h], corr)), d));
        }
      }
      float row[kLanes];
      for (int h = 0; h < 4; ++h) vst1q_f32(row + 4 * h, fsum[h]);
      std::memcpy(out + static_cast<size_t>(i) * out_stride + static_cast<size_t>(g) * kLanes, row,
                  sizeof(float) * static_cast<size_t>(lanes));
    }
  }
}
#endif

// + beta * C as ncnn broadcasts it, then * alpha: the same steps after every instance.
void finish(const lowbit::Bias& bias, float alpha, int M, int N, float* out, size_t out_stride) {
  if (bias.c == nullptr && alpha == 1.f) return;
  for (int i = 0; i < M; ++i) {
    float* o = out + static_cast<size_t>(i) * out_stride;
    for (int j = 0; j < N; ++j) {
      if (bias.c != nullptr) o[j] = o[j] + bias.beta * lowbit::broadcast_c(bias, N, i, j);
      if (alpha != 1.f) o[j] = o[j] * alpha;
    }
  }
}

}  // namespace

void gemm(const Weights& w, const float* a, size_t a_stride, int M, const lowbit::Bias& bias, float alpha,
          float* out, size_t out_stride, int threads, Instance instance) {
  const QuantizedInput in = quantize_input(w, a, a_stride, M, threads);
  switch (resolve(instance)) {
#if GSURG_W4A8_AVX512
    case 2: detail::gemm_avx512vnni(w, in, out, out_stride, threads); break;
#endif
#if GSURG_W4A8_AVX2
    case 1: detail::gemm_avx2(w, in, out, out_stride, threads); break;
#endif
#if defined(__aarch64__)
    case 3: gemm_neon(w, in, out, out_stride, threads); break;
#endif
    default: gemm_scalar(w, in, out, out_stride, threads); break;
  }
  finish(bias, alpha, M, w.N, out, out_stride);
}

}  // namespace gsurg::w4a8
