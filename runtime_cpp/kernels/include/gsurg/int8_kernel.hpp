// gsurg's kernel for ncnn's 8-bit block-quantized Gemm (Gemm 18=quantize_term 8xy, B constant, stored
// transB=1) on x86 CPUs with AVX-512 VNNI, or with AVX2 and FMA, with a layout and loop made for one input
// row at a time (a decode step), where ncnn 1.0.20261020's own x86 kernel (src/layer/x86/gemm_wq_int8.h)
// keeps one accumulator chain over eight columns (four in its AVX2 build). On the real-dimension
// 2B VLM's int8 conversion of the README the decode went from x0.58 to x1.17 llama.cpp Q8_0's with the VNNI instance
// (benchmarks/bench_beside_llamacpp.py; figures in the README).
//
// The arithmetic, as read in ncnn's source and in the pinned build's object code (gemm_x86_avx512vnni.cpp.o,
// and gemm_x86_avx2.cpp.o for the AVX2 instance: the same steps, its pack in 4-column groups):
//     for each input row i and block b of K:
//         absmax = max |v| (v = A[i][k], times input_scale[k] if any)
//         scale = 127 / absmax (0 when absmax is 0), descale_a = absmax * (1 / 127) (GCC's form of
//         absmax / 127 under -ffast-math; Descale picks the form, measured per process)
//         a_q[k] = v * scale rounded by "add +-0.5, truncate", clamped to [-127, 127]
//     for each column j:  descale_b[j][b] = 1 / weight scale, as ncnn's pack computes it: an approximate
//                         reciprocal and one Newton step (x0 + x0) - x0 * (x0 * s) for its 8- and 4-column
//                         groups, a division for the last N % 4 columns
//                         isum = sum over the block of a_q[k] * B_q[j][k]   (an exact integer)
//                         fsum = fma(float(isum), descale_a * descale_b[j][b], fsum), blocks in order
//     out[i][j] = fsum * alpha   (no C: the only form this kernel takes)
// alpha is one multiply of the finished sum, after its last block, skipped at alpha 1: ncnn's tile step
// (gemm_transB_packed_tile_wq_int8) never sees alpha, its unpack (unpack_output_tile_wq_int8) adds C times
// beta, then multiplies by alpha, in every row and column path (src/layer/x86/gemm_wq_int8.h), so for any
// descale form and row count. (A rule file may fold a residual scale into the alpha of the Gemm that makes
// the branch.)
// Integer sums are exact in any order, so only the float steps must match, and they are done here in that
// order. For one input row the outputs equal ncnn's bit for bit; LowBitGemm checks that once per process
// against the builtin layer (int8_descale) and takes nothing over when it does not hold. For several rows
// ncnn's build quantizes most rows (its 8- and 4-row paths) with an approximate reciprocal scale and, with
// an input scale, multiplies in another order (RowForms). The AVX2 instance reproduces that beside ncnn's
// AVX build, so there every row equals ncnn's; the VNNI instance does not (ncnn's AVX-512 paths were not
// read): a row then differs in its last bits now and then (1 row in 8190 in the check's random cases).
// kernels/tests/int8_gemm_check.cpp holds the one-row outputs against ncnn's layer and every output against
// a scalar model of the arithmetic above, bit for bit.
//
// The layout (Int8Weights): columns in groups of 16 (the last padded with zero weights), and for each group
// and block, the block's codes as 16 lanes of 4 consecutive k (one VNNI step), then the lanes' correction
// 128 * sum of the block's codes (the VNNI instance feeds A as unsigned bytes a_q + 128; the AVX2 one does
// not read it), then the lanes' descales (1 / scale). One group is one sequential stream, 1 + 192 / block
// bytes per weight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gsurg::int8k {

constexpr int kLanes = 16;

enum class Descale { kDivide, kReciprocal };

struct Int8Weights {
  int block = 0;  // k per scale: 32, 64 or 128
  int K = 0, N = 0;
  int groups = 0;             // ceil(N / kLanes)
  size_t group_bytes = 0;     // bytes of one group: blocks * (block * kLanes + 2 * 4 * kLanes)
  // [group][block]{codes[block/4][lane][4], corr[lane] int32, descale[lane]}: uninitialised on allocation,
  // so that the threads packing it are the first to touch its pages (no zeroing pass on one thread).
  std::unique_ptr<unsigned char[]> data;
  std::vector<float> input_scales;  // [K], empty without ncnn's per-k input scale (format 1)
  bool has_min_code = false;        // whether any code is -128 (the AVX2 instance then splits signs otherwise)
};

// Whether this process's CPU runs the kernel (x86 with AVX-512 F, BW, VL and VNNI, or with AVX2 and FMA,
// and a build that has that instance).
bool available();

// The instance gemm() runs here: "avx512-vnni", "avx2" or "none".
const char* kernel_name();

// Whether the layout holds this shape: a block of 32, 64 or 128 and K a positive multiple of it.
bool packable(int block, int K);

// Packing in two steps, in the order ncnn's .bin holds the parts: pack_codes lays out the codes (N rows of
// K signed bytes; `threads` OpenMP threads share the column groups); attach_scales adds the block scales
// (N rows of K / block floats; the descale is their reciprocal, computed as ncnn's x86 pack computes it:
// an approximate reciprocal and one Newton step for all but the last N % 4 columns, which it divides) and
// the input scales (K floats, or null).
Int8Weights pack_codes(int block, int K, int N, const signed char* rows, int threads = 1);
void attach_scales(Int8Weights& w, const float* scales, const float* input_scales);

// How ncnn quantizes the rows of a multi-row input. Its x86 build cuts the rows into tiles of tile_m and
// quantizes each tile's rows 8 (or 16) and then 4 at a time while at least 4 are left, with the scale
// 127 * r where r is the approximate reciprocal of absmax and one Newton step, (r0 + r0) - r0 * (r0 *
// absmax), and its last tile_m % 4 rows 2 or 1 at a time with 127 / absmax (read in gemm_x86_avx2.cpp.o).
// tile_m 0: every row with 127 / absmax (a decode step's one row always is).
struct RowForms {
  int tile_m = 0;
};

// The row forms gemm() should take to equal this process's ncnn for an M-row input of K columns with this
// block, ncnn's param 20 (constant_TILE_M, 0 when absent) and nt threads: where the AVX2 instance runs beside
// ncnn's __AVX__ build (a CPU without AVX-512), the tile_m of that build's get_optimal_tile_mnk_wq_int8
// (src/layer/x86/gemm_wq_int8.h), from this CPU's L2 size and core count as ncnn reports them; else none
// (the VNNI instance, and a CPU with AVX-512 but not VNNI, whose ncnn build quantizes rows in ways not
// reproduced here).
RowForms ncnn_row_forms(int M, int K, int block, int constant_tile_m, int nt);

// out (M rows of N floats, out_stride apart) = alpha times A (M rows of K floats, a_stride apart) times the
// weights, alpha applied as the statement above says; threads > 1 splits the column groups among OpenMP
// threads (the result does not depend on the split).
// rows: how each row's scale is computed (honoured by the AVX2 instance; the VNNI one divides for every
// row). Requires available().
void gemm(const Int8Weights& w, const float* a, size_t a_stride, int M, float alpha, float* out,
          size_t out_stride, int threads, Descale descale, RowForms rows = RowForms());

}  // namespace gsurg::int8k
