// int8_gemm_check: the 8-bit kernel (kernels/include/gsurg/int8_kernel.hpp) as LowBitGemm runs it.
//
// Where the kernel runs (a CPU with AVX-512 VNNI or AVX2 + FMA and an ncnn whose decode step it reproduces,
// gsurg::int8_descale() >= 0):
//   1. one input row (a decode step), every shape below: the output equals ncnn's builtin Gemm bit for bit
//      (memcmp) -- ncnn is the golden;
//   2. every row count: the output equals this file's own scalar model of the arithmetic int8_kernel.hpp
//      states, bit for bit (written here from that statement, not from the kernel's code), so the kernel's
//      tiling over rows and columns and its threads change nothing; with 1. this ties the model to ncnn.
//      Against ncnn at several rows the outputs are only counted: ncnn's x86 build quantizes some rows of
//      a multi-row input with an approximate reciprocal of the block scale (its 4-row paths), which the
//      kernel does not reproduce; the precision ctests compare whole generations with the ncnn wheel.
//   3. alpha not 1 (0.2213594 = 1.4 / sqrt(40), a residual scale folded into alpha, 0.5, 3, negatives),
//      one row and several (ncnn's 8-, 4-, 2- and 1-row output paths), both formats and every block: as 1.
//      and 2.; and the model with alpha folded into the block descale instead of multiplying the finished
//      sum must differ from ncnn's output in some of these cases, so that they tell the orders apart;
//   4. the forms the kernel does not take (a C, K not a whole number of blocks, packing options) stay with
//      ncnn's layer (packed() false) and give its output.
// Elsewhere it checks that LowBitGemm hands every 8-bit Gemm to ncnn's builtin layer, unchanged.
//
// Exit status 0 when every check holds, 1 otherwise (printing the first differing output of each case).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include <layer.h>
#include <layer_type.h>
#include <mat.h>
#include <modelbin.h>
#include <option.h>
#include <paramdict.h>

#include "gsurg/int8_kernel.hpp"
#include "gsurg/lowbit_gemm.hpp"

namespace {

struct Case {
  int format, block, K, N, M, threads;
  int c_mode;  // -2 none, -1 constant but absent (type -1), 4 constant per column (not taken)
  float alpha;
  bool packing;  // the net's options pack (not taken)
  bool min_code = false;  // codes over [-128, 127], at least one -128 (else [-127, 127], as quantizers write)
};

std::string describe(const Case& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "format %d block %d K %d N %d M %d threads %d C %d alpha %g packing %d%s",
                c.format, c.block, c.K, c.N, c.M, c.threads, c.c_mode, c.alpha, c.packing ? 1 : 0,
                c.min_code ? " codes to -128" : "");
  return buf;
}

struct Weights {
  std::vector<signed char> codes;  // N rows of K
  std::vector<float> scales;       // N rows of K / block (rounded up)
  std::vector<float> input_scales; // K, or empty
  std::vector<float> c;            // N, or empty
};

// --- the scalar model of int8_kernel.hpp's statement ------------------------------------------------------

// ncnn's descale of a weight block as the statement gives it: approximate reciprocal and one Newton step,
// except the last N % 4 columns, which divide.
float weight_descale(float scale, int j, int N) {
#if defined(__x86_64__) || defined(_M_X64)
  if (j < N - N % 4) {
    const __m128 a = _mm_set_ss(scale);
    const __m128 x0 = _mm_rcp_ss(a);
    return _mm_cvtss_f32(_mm_sub_ss(_mm_add_ss(x0, x0), _mm_mul_ss(x0, _mm_mul_ss(x0, a))));
  }
#else
  (void)j, (void)N;
#endif
  return 1.f / scale;
}

// One rounding, as the kernel's vfmadd (some C libraries' fmaf, mingw-w64's, round twice); the model runs
// only where the kernel does, on a CPU with AVX-512 and so with FMA.
#if defined(__x86_64__) || defined(_M_X64)
__attribute__((target("fma"))) float fused(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
#else
float fused(float a, float b, float c) { return std::fma(a, b, c); }
#endif

// A row's scale 127 / absmax, or, for a row ncnn quantizes in its 8- or 4-row paths, 127 times the
// approximate reciprocal of absmax after one Newton step (the statement's RowForms).
float row_scale(float absmax, bool approximate) {
  if (absmax == 0.f) return 0.f;
#if defined(__x86_64__) || defined(_M_X64)
  if (approximate) {
    const __m128 x = _mm_set_ss(absmax);
    const __m128 r0 = _mm_rcp_ss(x);
    const float r = _mm_cvtss_f32(_mm_sub_ss(_mm_add_ss(r0, r0), _mm_mul_ss(r0, _mm_mul_ss(r0, x))));
    return 127.f * r;
  }
#else
  (void)approximate;
#endif
  return 127.f / absmax;
}

// Whether row i of M is one ncnn quantizes in a group of 4 or more rows: every row of a tile of tile_m
// but its last (tile rows % 4).
bool approximate_row(int i, int M, int tile_m) {
  if (tile_m <= 0) return false;
  const int first = i / tile_m * tile_m;
  const int rows = std::min(M - first, tile_m);
  return i - first < rows - rows % 4;
}

// fold_alpha: alpha wrongly folded into each block's descale (to show the cases tell the orders apart).
std::vector<float> model(const Weights& w, const Case& c, const std::vector<float>& a, bool reciprocal,
                         int tile_m, bool fold_alpha = false) {
  const int blocks = c.K / c.block;
  std::vector<float> out(static_cast<size_t>(c.M) * c.N);
  for (int i = 0; i < c.M; ++i) {
    const bool approximate = c.M > 1 && approximate_row(i, c.M, tile_m);
    const float* v = a.data() + static_cast<size_t>(i) * c.K;
    std::vector<int> q(c.K);
    std::vector<float> descale_a(blocks);
    for (int b = 0; b < blocks; ++b) {
      float absmax = 0.f;
      for (int k = b * c.block; k < (b + 1) * c.block; ++k) {
        const float m = w.input_scales.empty() ? std::fabs(v[k]) : std::fabs(v[k]) * w.input_scales[k];
        if (m > absmax) absmax = m;
      }
      const float scale = row_scale(absmax, approximate);
      descale_a[b] = reciprocal ? absmax * (1.f / 127.f) : absmax / 127.f;
      for (int k = b * c.block; k < (b + 1) * c.block; ++k) {
        // with an input scale, (v * s) * scale, or (v * scale) * s in ncnn's multi-row paths (RowForms)
        const float t = w.input_scales.empty() ? v[k] * scale
                        : approximate          ? (v[k] * scale) * w.input_scales[k]
                                               : (v[k] * w.input_scales[k]) * scale;
        const float adj = t + (std::signbit(t) ? -0.5f : 0.5f);
        q[k] = std::max(-127, std::min(127, static_cast<int>(adj)));
      }
    }
    for (int j = 0; j < c.N; ++j) {
      float fsum = 0.f;
      for (int b = 0; b < blocks; ++b) {
        int32_t isum = 0;
        for (int k = b * c.block; k < (b + 1) * c.block; ++k)
          isum += q[k] * static_cast<int32_t>(w.codes[static_cast<size_t>(j) * c.K + k]);
        const float scale_b = w.scales[static_cast<size_t>(j) * blocks + b];
        float descale = descale_a[b] * weight_descale(scale_b, j, c.N);
        if (fold_alpha) descale = descale * c.alpha;
        fsum = fused(static_cast<float>(isum), descale, fsum);
      }
      // alpha: one multiply of the finished sum, none at alpha 1
      out[static_cast<size_t>(i) * c.N + j] = fold_alpha || c.alpha == 1.f ? fsum : fsum * c.alpha;
    }
  }
  return out;
}

// --- ncnn's layer and LowBitGemm on the same weights -------------------------------------------------------

ncnn::Option options(const Case& c) {
  ncnn::Option opt;
  opt.num_threads = c.threads;
  opt.use_packing_layout = c.packing;
  opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = false;
  opt.use_bf16_storage = opt.use_bf16_packed = false;
  opt.use_vulkan_compute = false;
  return opt;
}

int block_code(int block) { return block == 32 ? 0 : block == 64 ? 1 : 2; }

bool build(ncnn::Layer* layer, const Case& c, const Weights& w, const ncnn::Option& opt) {
  ncnn::ParamDict pd;
  pd.set(0, c.alpha);
  pd.set(3, 1);
  pd.set(5, 1);
  pd.set(6, c.c_mode == -2 ? 0 : 1);
  pd.set(7, c.M);
  pd.set(8, c.N);
  pd.set(9, c.K);
  pd.set(10, c.c_mode == -2 ? 0 : c.c_mode);
  pd.set(18, 800 + c.format * 10 + block_code(c.block));
  const int blocks = (c.K + c.block - 1) / c.block;
  std::vector<ncnn::Mat> mats;
  mats.push_back(ncnn::Mat(c.K, c.N, const_cast<signed char*>(w.codes.data()), static_cast<size_t>(1u)));
  if (c.c_mode == 4) mats.push_back(ncnn::Mat(c.N, 1, const_cast<float*>(w.c.data())));
  mats.push_back(ncnn::Mat(blocks, c.N, const_cast<float*>(w.scales.data())));
  if (c.format == 1) mats.push_back(ncnn::Mat(c.K, const_cast<float*>(w.input_scales.data())));
  if (layer->load_param(pd) != 0) return false;
  ncnn::ModelBinFromMatArray mb(mats.data());
  return layer->load_model(mb) == 0 && layer->create_pipeline(opt) == 0;
}

bool first_difference(const float* want, const float* got, int M, int N, const std::string& what) {
  for (int i = 0; i < M * N; ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      std::printf("FAIL %s: out[%d][%d] want %.9g, got %.9g\n", what.c_str(), i / N, i % N, want[i], got[i]);
      return true;
    }
  }
  return false;
}

Weights random_weights(const Case& c, std::mt19937& rng) {
  Weights w;
  std::uniform_int_distribution<int> code(c.min_code ? -128 : -127, 127);
  std::uniform_real_distribution<float> positive(1.f, 90.f), unit(-1.f, 1.f);
  w.codes.resize(static_cast<size_t>(c.K) * c.N);
  for (auto& x : w.codes) x = static_cast<signed char>(code(rng));
  if (c.min_code) w.codes[w.codes.size() / 2] = -128;
  w.scales.resize(static_cast<size_t>((c.K + c.block - 1) / c.block) * c.N);
  for (auto& x : w.scales) x = positive(rng);
  if (c.format == 1) {
    w.input_scales.resize(c.K);
    for (auto& x : w.input_scales) x = positive(rng) / 30.f;
  }
  if (c.c_mode == 4) {
    w.c.resize(c.N);
    for (auto& x : w.c) x = unit(rng);
  }
  return w;
}

// A with magnitudes over twelve octaves, and now and then an exact zero block, so that rounding shows.
std::vector<float> random_input(const Case& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  std::uniform_int_distribution<int> octave(-6, 6);
  std::vector<float> a(static_cast<size_t>(c.M) * c.K);
  for (auto& x : a) x = std::ldexp(unit(rng), octave(rng));
  if (c.K >= 2 * c.block && c.M > 1) std::fill(a.begin() + c.K, a.begin() + c.K + c.block, 0.f);
  return a;
}

struct Tally {
  int cases = 0, failures = 0, rows_compared = 0, rows_equal = 0;
  int alpha_cases = 0, alpha_order_shown = 0;  // taken cases with alpha != 1; of them, where folding differs
};

void run_case(const Case& c, std::mt19937& rng, bool kernel_runs, bool reciprocal, Tally& tally) {
  ++tally.cases;
  const Weights w = random_weights(c, rng);
  const std::vector<float> a = random_input(c, rng);
  const ncnn::Option opt = options(c);
  std::unique_ptr<ncnn::Layer> builtin(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  gsurg::LowBitGemm mine(gsurg::lowbit::Kernel::kBest, !c.packing, c.threads);
  if (!build(builtin.get(), c, w, opt) || !build(&mine, c, w, opt)) {
    std::printf("FAIL %s: a layer refused the params or weights\n", describe(c).c_str());
    ++tally.failures;
    return;
  }
  const bool taken_form = c.c_mode != 4 && !c.packing && c.K % c.block == 0;
  const bool expect_packed = kernel_runs && taken_form;
  bool ok = true;
  if (mine.packed() != expect_packed) {
    std::printf("FAIL %s: packed() %d, expected %d\n", describe(c).c_str(), mine.packed(), expect_packed);
    ok = false;
  }
  ncnn::Mat in(c.K, c.M, const_cast<float*>(a.data()));
  std::vector<ncnn::Mat> bottoms(1, in), want(1), got(1);
  if (builtin->forward(bottoms, want, opt) != 0 || mine.forward(bottoms, got, opt) != 0) {
    std::printf("FAIL %s: a forward failed\n", describe(c).c_str());
    ++tally.failures;
    return;
  }
  // The builtin may pack its output rows (packing options); compare in plain layout.
  ncnn::Mat want_plain = want[0], got_plain = got[0];
  if (want_plain.elempack != 1) ncnn::convert_packing(want[0], want_plain, 1, opt);
  if (got_plain.elempack != 1) ncnn::convert_packing(got[0], got_plain, 1, opt);
  const float* pw = static_cast<const float*>(want_plain.data);
  const float* pg = static_cast<const float*>(got_plain.data);
  // Where the kernel reproduces how ncnn tiles and quantizes several rows (the AVX2 instance beside ncnn's
  // AVX build), every row must equal ncnn's; elsewhere the rows of a multi-row input are only counted.
  const int tile_m = gsurg::int8k::ncnn_row_forms(c.M, c.K, c.block, 0, c.threads).tile_m;
  if (!expect_packed || c.M == 1 || tile_m > 0) {
    ok = !first_difference(pw, pg, c.M, c.N, describe(c) + (expect_packed ? " vs ncnn" : " (builtin)")) && ok;
  } else {
    for (int i = 0; i < c.M; ++i) {
      ++tally.rows_compared;
      const size_t row = static_cast<size_t>(i) * c.N;
      if (std::memcmp(pw + row, pg + row, sizeof(float) * c.N) == 0)
        ++tally.rows_equal;
    }
  }
  if (expect_packed) {
    const std::vector<float> m = model(w, c, a, reciprocal, tile_m);
    ok = !first_difference(m.data(), pg, c.M, c.N, describe(c) + " vs the model") && ok;
    if (c.alpha != 1.f) {
      ++tally.alpha_cases;
      // the rows compared with ncnn above: the one row, or all where the kernel reproduces ncnn's rows
      const int rows = c.M == 1 || tile_m > 0 ? c.M : 0;
      const std::vector<float> folded = model(w, c, a, reciprocal, tile_m, true);
      if (std::memcmp(folded.data(), pw, sizeof(float) * static_cast<size_t>(rows) * c.N) != 0)
        ++tally.alpha_order_shown;
    }
  }
  builtin->destroy_pipeline(opt);
  mine.destroy_pipeline(opt);
  if (!ok) ++tally.failures;
}

}  // namespace

int main() {
  const bool available = gsurg::int8k::available();
  const int descale = gsurg::int8_descale();
  const bool kernel_runs = available && descale >= 0;
  if (!available) {
    std::printf("no 8-bit kernel on this CPU or build (neither AVX-512 VNNI nor AVX2 + FMA): every 8-bit "
                "Gemm must stay with ncnn's layer\n");
  } else if (descale < 0) {
    std::printf("the kernel runs here but reproduces neither descale form of this ncnn's 8-bit kernel: every "
                "8-bit Gemm must stay with ncnn's layer\n");
  } else {
    std::printf("the %s kernel runs here; this ncnn computes the input descale as %s\n",
                gsurg::int8k::kernel_name(), descale == 1 ? "absmax * (1 / 127)" : "absmax / 127");
  }
  std::mt19937 rng(20261203);
  Tally tally;
  int n = 0;
  for (int format : {0, 1}) {
    for (int block : {32, 64, 128}) {
      for (int K : {block, 3 * block, 2048}) {
        for (int N : {1, 3, 4, 13, 16, 40, 100, 1000}) {
          for (int M : {1, 2, 5, 17, 40}) {
            if (N == 1000 && M > 5) continue;
            const int threads = n % 2 == 0 ? 1 : 2;
            const int c_mode = n % 3 == 0 ? -1 : -2;
            const Case c{format, block, K, N, M, threads, c_mode, 1.f, false};
            run_case(c, rng, kernel_runs, descale == 1, tally);
            ++n;
          }
        }
      }
    }
  }
  // Weights of -128 (ncnn's format allows them; gsurg's quantizer and ncnn's write [-127, 127]).
  for (int block : {32, 64, 128}) {
    for (int M : {1, 5}) {
      run_case({0, block, 3 * block, 40, M, 2, -2, 1.f, false, true}, rng, kernel_runs, descale == 1, tally);
      run_case({1, block, 2 * block, 13, M, 1, -2, 1.f, false, true}, rng, kernel_runs, descale == 1, tally);
    }
  }
  // alpha not 1: one row and several (ncnn's unpack runs its 8-, 4-, 2- and 1-row paths), both formats,
  // every block, some columns in ncnn's 2- and 1-column tails (N % 4), with and without an absent C.
  for (float alpha : {0.2213594f, 0.5f, 3.f, -0.2213594f, -2.5f}) {
    for (int format : {0, 1}) {
      for (int block : {32, 64, 128}) {
        for (int M : {1, 2, 3, 4, 5, 8, 13, 40}) {
          const int N = n % 3 == 0 ? 13 : n % 3 == 1 ? 40 : 103;
          const int K = n % 2 == 0 ? 3 * block : 2048;
          const int threads = n % 2 == 0 ? 2 : 1;
          const int c_mode = n % 3 == 0 ? -1 : -2;
          run_case({format, block, K, N, M, threads, c_mode, alpha, false}, rng, kernel_runs, descale == 1, tally);
          ++n;
        }
      }
    }
  }
  run_case({0, 64, 3 * 64, 40, 5, 2, -2, 3.f, false, true}, rng, kernel_runs, descale == 1, tally);
  run_case({1, 32, 2 * 32, 13, 1, 1, -2, 0.2213594f, false, true}, rng, kernel_runs, descale == 1, tally);
  // Forms the kernel does not take.
  for (int M : {1, 4}) {
    run_case({0, 64, 256, 40, M, 2, 4, 1.f, false}, rng, kernel_runs, descale == 1, tally);
    run_case({0, 64, 256, 40, M, 2, 4, 0.5f, false}, rng, kernel_runs, descale == 1, tally);
    run_case({1, 64, 200, 40, M, 1, -2, 1.f, false}, rng, kernel_runs, descale == 1, tally);
    run_case({0, 32, 256, 40, M, 2, -2, 1.f, true}, rng, kernel_runs, descale == 1, tally);
  }
  // The alpha cases must tell a multiply of the finished sum from alpha folded into the descales.
  if (kernel_runs && tally.alpha_order_shown == 0) {
    std::printf("FAIL: in none of the %d alpha cases does alpha folded into the descales differ from ncnn's "
                "output: the cases cannot tell the order apart\n", tally.alpha_cases);
    ++tally.failures;
  }
  if (kernel_runs)
    std::printf("alpha != 1: %d cases taken by the kernel; alpha folded into the descales would differ from "
                "ncnn in %d of them\n", tally.alpha_cases, tally.alpha_order_shown);
  std::printf("%d cases, %d failed", tally.cases, tally.failures);
  if (tally.rows_compared > 0)
    std::printf("; against ncnn at several rows (counted, not required): %d of %d rows bit-identical",
                tally.rows_equal, tally.rows_compared);
  std::printf("\n");
  return tally.failures == 0 ? 0 : 1;
}
