// gsurg's kernel for ncnn's 4- and 6-bit block-quantized Gemm (Gemm 18=quantize_term 4xy / 6xy, B constant
// and stored transB=1): the same outputs, bit for bit, as ncnn 1.0.20261020's own loop for these weights
// (src/layer/gemm.cpp forward_weight_block_quantize, the only code any CPU build of ncnn has for 4 and 6
// bits), computed eight output columns at a time on every thread instead of one column at a time on one
// thread per input row.
//
// Why the results are identical: ncnn's source computes each output as
//     sum = C * beta (or 0); for each block b, descale = 1 / scale[j][b];
//     for each k of the block: sum += v * (q * descale)   (v = A[i][k], times input_scale[k] if any)
//     out = sum * alpha
// in k order, and ncnn is compiled with -ffast-math: in the pinned build's gemm.cpp.o GCC keeps
// (q * descale) * (v * input_scale) with an input scale and reassociates to q * (v * descale) without one
// (read with objdump in the x86-64, aarch64 and mingw-w64 builds alike). Whether it then fuses the add into
// a multiply-add depends on the build, not the source: the aarch64 build does (fmadd), so does the mingw
// build (compiled for AVX2 + FMA: vfmadd231ss), the baseline x86-64 build and the wheel cannot (SSE2).
// The kernel performs those operations in that order for every output, with the rounding (Rounding)
// the ncnn it runs beside uses, which LowBitGemm measures once per process (lowbit_gemm.hpp); it only
// runs eight outputs (columns j) side by side in SIMD lanes (sixteen with AVX-512: two column groups in one
// register), and several rows i over the same decoded weights. kernels/tests/lowbit_gemm_check.cpp holds it against ncnn's builtin Gemm, bit for bit, on every
// build the ctests run (Linux, ASan, mingw under wine, aarch64 under qemu).
//
// The layout (PackedWeights): ncnn's row j is a little-endian bit stream, weight k at bit k*bits. The 32-bit
// word at byte 4w of the row therefore holds whole weights: 8 of them at 4 bits, and at 6 bits three
// consecutive words hold 16. pack_codes() interleaves those words of eight consecutive rows, so one 8-lane load
// gives the same k-range of eight columns and every weight is decoded with one shift-left and one
// arithmetic shift-right by counts shared by all lanes. It is a copy in the same bytes per weight, not a
// widening: the repacked matrix is as small as the .bin's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gsurg::lowbit {

constexpr int kLanes = 8;

struct PackedWeights {
  int bits = 0;          // 4 or 6
  int block = 0;         // k per scale: 32, 64 or 128
  int K = 0, N = 0;
  int groups = 0;        // ceil(N / kLanes): column groups, the last padded with zero weights
  int stored_groups = 0; // groups rounded up to even: a 16-lane kernel reads groups in pairs, and the
                         // group after an odd last one holds zero weights and descales of 1
  int chunk_k = 0;       // k per chunk: 8 (4 bits) or 16 (6 bits)
  int chunk_words = 0;   // 32-bit words per lane per chunk: 1 or 3
  std::vector<uint32_t> words;      // [stored group][chunk][word][lane]
  std::vector<float> descales;      // [stored group][block][lane]: 1.f / scale (1.f in padding lanes)
  std::vector<float> input_scales;  // [K], empty without ncnn's per-k input scale (format 1)
};

// Whether the layout holds this shape: bits 4 or 6, a block of 32/64/128, K a positive multiple of chunk_k.
bool packable(int bits, int block, int K);

// Packing in two steps, in the order ncnn's .bin holds the parts (a loader can pack the codes before it
// reads on, while their pages are still resident): pack_codes lays out the codes, rows: N rows of
// K * bits / 8 bytes, ncnn's bit stream; attach_scales adds the block scales (N rows of ceil(K / block)
// floats) and the input scales (K floats, or null). Both require packable(bits, block, K).
PackedWeights pack_codes(int bits, int block, int K, int N, const unsigned char* rows);
void attach_scales(PackedWeights& w, const float* scales, const float* input_scales);

// The bias term as ncnn's Gemm applies it: c null for none, else C broadcast by ncnn's type (0 one value,
// 1 and 2 one per row i, 3 a full M x N matrix, 4 one per column j) and multiplied by beta.
struct Bias {
  const float* c = nullptr;
  int broadcast = 0;
  float beta = 1.f;
};

// The C value output (i, j) of a product with N columns adds (times beta) under the bias's broadcast, as
// ncnn's Gemm reads C: 0 one scalar, 1 and 2 one value per row, 3 a whole M×N matrix, 4 one per column;
// 0 without C or with another broadcast.
inline float broadcast_c(const Bias& bias, int N, int i, int j) {
  if (bias.c == nullptr) return 0.f;
  switch (bias.broadcast) {
    case 0: return bias.c[0];
    case 1:
    case 2: return bias.c[i];
    case 3: return bias.c[static_cast<size_t>(i) * N + j];
    case 4: return bias.c[j];
    default: return 0.f;
  }
}

// How `sum + x * y` is rounded: twice (a multiply, then an add) or once (a fused multiply-add).
enum class Rounding { kSeparate, kFused };

// kBest: the widest this CPU runs (AVX-512 on x86 where the CPU has it, else AVX2 where it has that, NEON
// on aarch64); kEightLanes: the 8-lane instance of the same (AVX2 or NEON, else the portable lanes);
// kScalar: the portable lanes; kScalarWide: the portable lanes sixteen wide, the AVX-512 instance's loop
// (column groups in pairs) on any CPU. The check runs them all, so that every fallback is proven too.
enum class Kernel { kBest, kEightLanes, kScalar, kScalarWide };

// out (M rows of N floats, out_stride apart) = A (M rows of K floats, a_stride apart) times the weights, with
// the bias, times alpha; threads > 1 splits the column groups among OpenMP threads (the result does not
// depend on the split).
void gemm(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
          float* out, size_t out_stride, int threads, Rounding rounding, Kernel kernel = Kernel::kBest);

// Which instructions gemm() runs for a kernel choice here: "avx512", "avx512+fma", "avx2", "avx2+fma",
// "neon", "scalar" or "scalar x16".
const char* kernel_name(Rounding rounding, Kernel kernel = Kernel::kBest);

}  // namespace gsurg::lowbit
