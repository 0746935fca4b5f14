// The loop of lowbit_kernel.hpp's gemm() written once over a vector type V of 8 or 16 lanes, so that the
// AVX-512, AVX2, NEON and portable builds run the same operations in the same order. Included only by
// lowbit_kernel*.cpp, each of which is compiled with -ffp-contract=off (where the compiler has it): no
// product and sum the source keeps apart may be fused, and V::madd states explicitly where ncnn's own
// build fuses.
//
// V provides: kSpan, the column groups of kLanes one vector holds (1, or 2 for AVX-512); F (kSpan * kLanes
// floats), I (as many int32); load(const float*) and store(float*, F) of kSpan * kLanes consecutive floats;
// load_groups(const float*, size_t stride) and load_group_words(const uint32_t*, size_t stride), kLanes
// values of each of kSpan groups, the first at p and each next stride elements on; set1(float),
// shl / sra / shr (I, int count), bor(I, I), to_float(I), mul(F, F) and madd(acc, v, w) = acc + v * w
// rounded as ncnn's build rounds it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gsurg/lowbit_kernel.hpp"

namespace gsurg::lowbit::detail {

// Internal to each file that includes it, as the vector types are: the files are built with different
// instruction sets, and no function compiled for one may stand in for another's at link time.
namespace {

// The value ncnn's loop starts an output's sum with.
inline float bias_at(const Bias& bias, int N, int i, int j) {
  return bias.c ? broadcast_c(bias, N, i, j) * bias.beta : 0.f;
}

// One k of R rows, associated as ncnn's build associates it. The source says sum += v * (q * descale); ncnn is
// compiled with -ffast-math, and GCC (x86 and aarch64 alike, read in the pinned build's gemm.cpp.o) keeps
// (q * descale) * (v * input_scale) when there is an input scale but reassociates to q * (v * descale)
// when there is none. V::madd(acc, x, y) is acc + x * y.
template <class V, int R, bool kInputScale>
inline void step(typename V::F (&acc)[R], const float* const (&arow)[R], const float* input_scales, int k,
                 typename V::F q, typename V::F dv) {
  if (kInputScale) {
    const typename V::F wq = V::mul(q, dv);
    for (int r = 0; r < R; ++r) acc[r] = V::madd(acc[r], V::set1(arow[r][k] * input_scales[k]), wq);
  } else {
    for (int r = 0; r < R; ++r) acc[r] = V::madd(acc[r], q, V::mul(V::set1(arow[r][k]), dv));
  }
}

// The weight at bits [shift, shift + bits) of x, sign-extended: one shift left to the top, one arithmetic
// shift right back.
template <class V>
inline typename V::I field(typename V::I x, int bits, int shift) {
  return V::sra(V::shl(x, 32 - bits - shift), 32 - bits);
}

// One chunk (8 k at 4 bits, 16 at 6) of G column groups and R rows. Each k goes through all G groups
// before the next: every output has its own accumulator, so G x R independent chains hide the add's
// latency (with one row, a single chain would wait on it at every k).
template <class V, int R, int G, bool kInputScale>
inline void chunk4(const uint32_t* const (&wp)[G], size_t group_words, const typename V::F (&dv)[G], int k,
                   typename V::F (&acc)[G][R], const float* const (&arow)[R], const float* input_scales) {
  typename V::I w0[G];
  for (int g = 0; g < G; ++g) w0[g] = V::load_group_words(wp[g], group_words);
  for (int kk = 0; kk < 8; ++kk) {
    for (int g = 0; g < G; ++g) {
      const typename V::F q = V::to_float(field<V>(w0[g], 4, 4 * kk));
      step<V, R, kInputScale>(acc[g], arow, input_scales, k + kk, q, dv[g]);
    }
  }
}

template <class V, int R, int G, bool kInputScale>
inline void chunk6(const uint32_t* const (&wp)[G], size_t group_words, const typename V::F (&dv)[G], int k,
                   typename V::F (&acc)[G][R], const float* const (&arow)[R], const float* input_scales) {
  typename V::I w0[G], w1[G], w2[G], w01[G], w12[G];
  for (int g = 0; g < G; ++g) {
    w0[g] = V::load_group_words(wp[g], group_words);
    w1[g] = V::load_group_words(wp[g] + kLanes, group_words);
    w2[g] = V::load_group_words(wp[g] + 2 * kLanes, group_words);
    // Weights 5 and 10 straddle a word boundary (bits 30..35 and 60..65): join their two parts first.
    w01[g] = V::bor(V::shr(w0[g], 30), V::shl(w1[g], 2));
    w12[g] = V::bor(V::shr(w1[g], 28), V::shl(w2[g], 4));
  }
  for (int kk = 0; kk < 16; ++kk) {
    for (int g = 0; g < G; ++g) {
      typename V::I q;
      if (kk < 5) q = field<V>(w0[g], 6, 6 * kk);
      else if (kk == 5) q = field<V>(w01[g], 6, 0);
      else if (kk < 10) q = field<V>(w1[g], 6, 6 * kk - 32);
      else if (kk == 10) q = field<V>(w12[g], 6, 0);
      else q = field<V>(w2[g], 6, 6 * kk - 64);
      step<V, R, kInputScale>(acc[g], arow, input_scales, k + kk, V::to_float(q), dv[g]);
    }
  }
}

// Rows i0 .. i0+R-1 of G vectors of column groups: vector g holds groups g0 + g * kSpan onwards.
template <class V, int R, int G, bool kInputScale>
void tile_rows(const PackedWeights& w, int g0, const float* a, size_t a_stride, int i0, const Bias& bias,
               float alpha, float* out, size_t out_stride) {
  constexpr int kWidth = V::kSpan * kLanes;
  const int nchunks = w.K / w.chunk_k;
  const int nblocks = (w.K + w.block - 1) / w.block;
  const size_t group_words = static_cast<size_t>(nchunks) * w.chunk_words * kLanes;
  const size_t group_descales = static_cast<size_t>(nblocks) * kLanes;
  const float* arow[R];
  for (int r = 0; r < R; ++r) arow[r] = a + static_cast<size_t>(i0 + r) * a_stride;
  typename V::F acc[G][R];
  const uint32_t* wp[G];
  const float* dp[G];
  for (int g = 0; g < G; ++g) {
    const int first = g0 + g * V::kSpan;  // the vector's first group; its columns are consecutive
    for (int r = 0; r < R; ++r) {
      float init[kWidth];
      for (int l = 0; l < kWidth; ++l) {
        const int j = first * kLanes + l;
        init[l] = j < w.N ? bias_at(bias, w.N, i0 + r, j) : 0.f;
      }
      acc[g][r] = V::load(init);
    }
    wp[g] = w.words.data() + static_cast<size_t>(first) * group_words;
    dp[g] = w.descales.data() + static_cast<size_t>(first) * group_descales;
  }
  const float* is = w.input_scales.empty() ? nullptr : w.input_scales.data();
  const size_t chunk_step = static_cast<size_t>(w.chunk_words) * kLanes;
  int k = 0;
  for (int b = 0; b < nblocks; ++b) {
    typename V::F dv[G];
    for (int g = 0; g < G; ++g) dv[g] = V::load_groups(dp[g] + static_cast<size_t>(b) * kLanes, group_descales);
    const int kend = std::min(w.K, (b + 1) * w.block);
    for (; k < kend; k += w.chunk_k) {
      if (w.bits == 4) chunk4<V, R, G, kInputScale>(wp, group_words, dv, k, acc, arow, is);
      else chunk6<V, R, G, kInputScale>(wp, group_words, dv, k, acc, arow, is);
      for (int g = 0; g < G; ++g) wp[g] += chunk_step;
    }
  }
  for (int g = 0; g < G; ++g) {
    const int first = g0 + g * V::kSpan;
    for (int r = 0; r < R; ++r) {
      float sums[kWidth];
      V::store(sums, acc[g][r]);
      float* o = out + static_cast<size_t>(i0 + r) * out_stride;
      for (int l = 0; l < kWidth; ++l) {
        const int j = first * kLanes + l;
        if (j < w.N) o[j] = sums[l] * alpha;
      }
    }
  }
}

template <class V, int R, int G>
void tile(const PackedWeights& w, int g0, const float* a, size_t a_stride, int i0, const Bias& bias,
          float alpha, float* out, size_t out_stride) {
  if (w.input_scales.empty()) tile_rows<V, R, G, false>(w, g0, a, a_stride, i0, bias, alpha, out, out_stride);
  else tile_rows<V, R, G, true>(w, g0, a, a_stride, i0, bias, alpha, out, out_stride);
}

// All rows of G vectors of column groups from g0: four rows at a time over the same decoded weights, and
// the last rows with as many vectors side by side as keeps four accumulators (a decode step's one row runs
// four vectors, 32 or 64 columns, at once).
template <class V, int G>
void groups_all_rows(const PackedWeights& w, int g0, const float* a, size_t a_stride, int M, const Bias& bias,
                     float alpha, float* out, size_t out_stride) {
  constexpr int S = V::kSpan;
  int i0 = 0;
  for (; i0 + 4 <= M; i0 += 4)
    for (int g = 0; g < G; ++g) tile<V, 4, 1>(w, g0 + g * S, a, a_stride, i0, bias, alpha, out, out_stride);
  const int left = M - i0;
  if (G == 4 && left == 1) {
    tile<V, 1, 4>(w, g0, a, a_stride, i0, bias, alpha, out, out_stride);
    return;
  }
  if (G == 4 && left == 2) {
    tile<V, 2, 2>(w, g0, a, a_stride, i0, bias, alpha, out, out_stride);
    tile<V, 2, 2>(w, g0 + 2 * S, a, a_stride, i0, bias, alpha, out, out_stride);
    return;
  }
  for (int g = 0; g < G; ++g) {
    const int gg = g0 + g * S;
    if (left == 3) tile<V, 3, 1>(w, gg, a, a_stride, i0, bias, alpha, out, out_stride);
    if (left == 2) tile<V, 2, 1>(w, gg, a, a_stride, i0, bias, alpha, out, out_stride);
    if (left == 1) tile<V, 1, 1>(w, gg, a, a_stride, i0, bias, alpha, out, out_stride);
  }
}

// Vectors of column groups in blocks of four, split among the threads (the last few vectors one by one). A
// 16-lane V reads the groups in pairs, the last pair's second group from the padding pack_codes stores.
template <class V>
void run(const PackedWeights& w, const float* a, size_t a_stride, int M, const Bias& bias, float alpha,
         float* out, size_t out_stride, int threads) {
  constexpr int kVectors = 4;
  constexpr int S = V::kSpan;
  (void)threads;  // unused without OpenMP
  const int vectors = (w.groups + S - 1) / S;
  const int blocks = vectors / kVectors;
  const int units = blocks + vectors % kVectors;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int u = 0; u < units; ++u) {
    if (u < blocks) groups_all_rows<V, kVectors>(w, u * kVectors * S, a, a_stride, M, bias, alpha, out, out_stride);
    else groups_all_rows<V, 1>(w, (blocks * kVectors + (u - blocks)) * S, a, a_stride, M, bias, alpha, out, out_stride);
  }
}

}  // namespace

}  // namespace gsurg::lowbit::detail
