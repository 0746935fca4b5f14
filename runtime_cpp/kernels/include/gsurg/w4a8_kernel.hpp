// gsurg's integer kernel for ncnn's 4-bit block-quantized Gemm (18=quantize_term 4xy, B constant, stored
// transB=1) that quantizes the input too: weights 4 bits, activations 8 bits per block ("w4a8"), the
// integer products summed exactly by the CPU's byte dot-product instructions (AVX-512 VNNI vpdpbusd, AVX2
// vpmaddubsw + vpmaddwd, NEON widening multiplies). It is the runner's opt-in alternative to
// lowbit_kernel.hpp, which reproduces ncnn's own float loop for these weights bit for bit but spends some
// six vector operations on every eight weights; here three or four cover sixty-four. It is what llama.cpp
// does for Q4_0 (its activations are quantized to 8 bits per block of 32 for the dot product) and what
// ncnn itself does for 8-bit weights (int8_kernel.hpp), applied to ncnn's 4-bit records.
//
// Not ncnn's arithmetic: an output differs from ncnn's float loop by the rounding of the input to 8 bits.
// The runner takes it only when asked (--int4-activations int8); kernels/tests/w4a8_gemm_check.cpp bounds the
// difference from ncnn's builtin Gemm by the rounding error it can make, and the precision ctests measure
// what it does to the tokens (teacher-forced agreement with the wheel's 4-bit run).
//
// The arithmetic (the contract every instance keeps, bit for bit, so that results do not depend on the CPU):
//     for each input row i and block b of K (the weights' block):
//         v[k] = A[i][k], times input_scale[k] if the weights have one
//         absmax = max |v[k]|;  scale = 127 / absmax and descale_a = absmax / 127 (both 0 when absmax is 0)
//         a_q[k] = v[k] * scale rounded half away from zero (add +-0.5, truncate), clamped to [-127, 127]
//     for each column j (codes c[j][k] in [-8, 7], ncnn's two's complement nibbles):
//         descale_w[j][b] = 1 / scale[j][b]          (the .bin's block scale, divided)
//         isum = sum over the block of a_q[k] * c[j][k]   (an exact integer, in any order)
//         fsum = fsum + float(isum) * (descale_a * descale_w[j][b])   (three roundings, blocks in order;
//                                                                      no fused multiply-add)
//     out[i][j] = fsum, then + beta * C (ncnn's broadcast of C), then * alpha when alpha is not 1.
// The input is quantized by one portable routine that every instance shares, and the float steps above are
// single IEEE operations in a fixed order, so every instance gives the same bits as the portable one.
//
// The layout (Weights): columns in groups of 16 (the last padded with zero weights). For each group and
// block: block / 8 chunks of 16 lanes x 4 bytes, byte t of lane l holding column l's codes k0 + t (low
// nibble) and k0 + 4 + t (high nibble) as c + 8 (0..15, so the instructions can read them as unsigned
// bytes; the sum is corrected by 8 * sum of the block's a_q, once per row and block); then the 16 lanes'
// descale_w. 0.5625 bytes per weight at block 64, the same as the .bin's records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gsurg/lowbit_kernel.hpp"

namespace gsurg::w4a8 {

constexpr int kLanes = 16;

struct Weights {
  int block = 0;  // k per scale: 32, 64 or 128
  int K = 0, N = 0;
  int groups = 0;          // ceil(N / kLanes)
  size_t group_bytes = 0;  // blocks * record_bytes(block)
  // [group][block]{codes[block / 8][lane][4], descale_w[lane] float}; uninitialised on allocation, so that
  // the threads packing it are the first to touch its pages.
  std::unique_ptr<unsigned char[]> data;
  std::vector<float> input_scales;  // [K], empty without ncnn's per-k input scale (format 1)
};

// Bytes of one (group, block) record: the codes, then the descales.
inline size_t record_bytes(int block) { return static_cast<size_t>(block) / 2 * kLanes + 4 * kLanes; }

// The input rows quantized as the contract says: q [M][K], descale_a and the correction 8 * sum(a_q)
// [M][K / block].
struct QuantizedInput {
  int M = 0, K = 0, blocks = 0;
  std::vector<signed char> q;
  std::vector<float> descale;
  std::vector<int32_t> correction;
};

// The instances: kBest the widest this CPU runs (AVX-512 VNNI, else AVX2, else NEON on aarch64, else the
// portable loop); kEightLanes the AVX2 instance on x86 (the portable loop where the CPU lacks AVX2) and
// NEON on aarch64; kScalar the portable loop. The check runs them all.
enum class Instance { kBest, kEightLanes, kScalar };

// Whether a SIMD instance runs on this CPU (the runner takes the kernel only then: the portable loop is
// correct everywhere but slower than lowbit_kernel's).
bool accelerated();

// The name of what gemm() runs for a choice here: "avx512-vnni", "avx2", "neon" or "scalar".
const char* instance_name(Instance instance = Instance::kBest);

// Whether the layout holds this shape: a block of 32, 64 or 128 and K a positive multiple of it.
bool packable(int block, int K);

// Packing in two steps, in the order ncnn's .bin holds the parts: pack_codes lays out the codes (N rows of
// K / 2 bytes, ncnn's bit stream: weight k in the low nibble of byte k / 2 when k is even, else the high
// one; `threads` OpenMP threads share the column groups); attach_scales adds the block scales (N rows of
// K / block floats) and the input scales (K floats, or null). Both require packable(block, K).
Weights pack_codes(int block, int K, int N, const unsigned char* rows, int threads = 1);
void attach_scales(Weights& w, const float* scales, const float* input_scales);

// The input quantized per the contract (the routine every instance shares).
QuantizedInput quantize_input(const Weights& w, const float* a, size_t a_stride, int M, int threads);

// out (M rows of N floats, out_stride apart) = A (M rows of K floats, a_stride apart) times the weights per
// the contract, with the bias and alpha; threads > 1 splits the column groups among OpenMP threads (the
// result does not depend on the split or on the instance).
void gemm(const Weights& w, const float* a, size_t a_stride, int M, const lowbit::Bias& bias, float alpha,
          float* out, size_t out_stride, int threads, Instance instance = Instance::kBest);

}  // namespace gsurg::w4a8
