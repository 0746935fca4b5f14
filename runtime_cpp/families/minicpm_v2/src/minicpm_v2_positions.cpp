// MiniCPM-V-2's position tables (see gsurg/minicpm_v2_positions.hpp): torch's antialiased bicubic resampling
// of the ViT's learned table and numpy's float32 2-D sin-cos table, each operation in the order and the
// precision the reference's build runs it. Built with floating-point contraction off
// (gsurg_fp_contract_off): a fused multiply-add happens only where fma_f32() is written.
#include "gsurg/minicpm_v2_positions.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "gsurg/error.hpp"

namespace gsurg {
namespace minicpm_v2 {

float fma_f32(float a, float b, float c) {
  // The product of two floats is exact in double (24 + 24 bits); the sum rounds once, to s. Converting s to
  // float rounds a second time, which is wrong only when s lies exactly halfway between two floats while the
  // exact sum does not: TwoSum gives the exact remainder err = a*b + c - s, whose sign breaks that tie.
  const double p = static_cast<double>(a) * static_cast<double>(b);
  const double s = p + static_cast<double>(c);
  const double z = s - p;
  const double err = (p - (s - z)) + (static_cast<double>(c) - z);
  float r = static_cast<float>(s);
  if (err != 0.0 && static_cast<double>(r) != s && std::isfinite(r)) {
    const float other = std::nextafter(r, s > r ? INFINITY : -INFINITY);  // the float on s's other side
    if (s - static_cast<double>(r) == static_cast<double>(other) - s) {
      r = (err > 0.0) == (other > r) ? other : r;
    }
  }
  return r;
}

namespace {

// ATen's HelperInterpCubic::aa_filter<float> (Keys cubic, a = -0.5), as torch's AVX2 build computes it: the
// polynomials in Horner form with fused multiply-adds, (1.5x - 2.5) x^2 + 1 and ((-0.5x + 2.5) x - 4) x + 2.
float cubic_aa(float x) {
  x = std::fabs(x);
  if (x < 1.0f) return fma_f32(x, x * fma_f32(x, 1.5f, -2.5f), 1.0f);
  if (x < 2.0f) return fma_f32(x, fma_f32(x, fma_f32(x, -0.5f, 2.5f), -4.0f), 2.0f);
  return 0.0f;
}

// One axis's taps: output i reads inputs [first[i], first[i] + count[i]) with weights w[i * max_taps + j].
struct Taps {
  int max_taps = 0;
  std::vector<int64_t> first, count;
  std::vector<float> w;
};

// HelperInterpBase::_compute_indices_min_size_weights_aa<float> for in -> out (align_corners false, no
// scale given): float scale and support, the center and the tap arguments through double as written there.
Taps taps_for(int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float support = scale >= 1.0f ? 2.0f * scale : 2.0f;
  const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  Taps t;
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out));
  t.count.resize(static_cast<size_t>(out));
  t.w.assign(static_cast<size_t>(out) * t.max_taps, 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    const float center = static_cast<float>(static_cast<double>(scale) * (static_cast<double>(i) + 0.5));
    const int64_t xmin =
        std::max<int64_t>(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), 0);
    int64_t xsize =
        std::min<int64_t>(static_cast<int64_t>(static_cast<double>(center + support) + 0.5), in) - xmin;
    xsize = std::clamp<int64_t>(xsize, 0, t.max_taps);
    float* w = &t.w[static_cast<size_t>(i) * t.max_taps];
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      const float offset = static_cast<float>(j + xmin) - center;
      const double arg = (static_cast<double>(offset) + 0.5) * static_cast<double>(invscale);
      w[j] = cubic_aa(static_cast<float>(arg));
      total += w[j];
    }
    if (total != 0.0f) {
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    }
    t.first[static_cast<size_t>(i)] = xmin;
    t.count[static_cast<size_t>(i)] = xsize;
  }
  return t;
}

// One pass along the middle axis of a [outer][in][inner] array (inner values contiguous) to
// [outer][out][inner]. Each output value sums its n taps src[first + j] * w[j] as torch's AVX2 build does
// (interpolate_separable_1d): the first tap's product; then, for n >= 5, floor((n - 1) / 4) groups of four
// taps whose unfused products are added in order; then one fused multiply-add per remaining tap (so every
// tap after the first when n <= 4).
std::vector<float> pass(const std::vector<float>& src, int64_t outer, int64_t in, int64_t inner,
                        int64_t out) {
  const Taps t = taps_for(in, out);
  std::vector<float> dst(static_cast<size_t>(outer * out * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < out; ++i) {
      const int64_t n = t.count[static_cast<size_t>(i)];
      const float* w = &t.w[static_cast<size_t>(i) * t.max_taps];
      const float* s = &src[static_cast<size_t>((o * in + t.first[static_cast<size_t>(i)]) * inner)];
      float* d = &dst[static_cast<size_t>((o * out + i) * inner)];
      if (n < 1) {
        std::fill(d, d + inner, 0.0f);  // no taps (cannot happen for in, out >= 1)
        continue;
      }
      for (int64_t k = 0; k < inner; ++k) d[k] = s[k] * w[0];
      int64_t j = 1;
      if (n - 1 >= 4) {
        for (; j + 4 <= n; j += 4) {
          const float* s0 = s + j * inner;
          for (int64_t k = 0; k < inner; ++k) {
            const float p0 = s0[k] * w[j];
            const float p1 = s0[k + inner] * w[j + 1];
            const float p2 = s0[k + 2 * inner] * w[j + 2];
            const float p3 = s0[k + 3 * inner] * w[j + 3];
            float acc = d[k];
            acc = acc + p0;
            acc = acc + p1;
            acc = acc + p2;
            acc = acc + p3;
            d[k] = acc;
          }
        }
      }
      for (; j < n; ++j) {
        const float* sj = s + j * inner;
        for (int64_t k = 0; k < inner; ++k) d[k] = fma_f32(sj[k], w[j], d[k]);
      }
    }
  }
  return dst;
}

// numpy's float32 sin/cos kernel (numpy >= 2 on x86-64; loops_trigonometric): x reduced by the quadrant
// q = rint(x * 2/pi) in three fused Cody-Waite steps, both polynomials of the reduced r, the one the
// quadrant picks, negated in quadrants 2 and 3 (cos: the quadrant plus one).
float numpy_sincos(float x, bool cosine) {
  const float limit = cosine ? 71476.0625f : 117435.992f;
  if (!(std::fabs(x) <= limit)) return cosine ? std::cos(x) : std::sin(x);  // numpy calls libm's cosf/sinf
  const float magic = 0x1.800000p+23f;
  const float quadrant = fma_f32(x, 0x1.45f306p-1f, magic) - magic;
  float r = fma_f32(quadrant, -0x1.921fb0p+00f, x);
  r = fma_f32(quadrant, -0x1.5110b4p-22f, r);
  r = fma_f32(quadrant, -0x1.846988p-48f, r);
  const float r2 = r * r;
  float c = fma_f32(0x1.98e616p-16f, r2, -0x1.6c06dcp-10f);
  c = fma_f32(c, r2, 0x1.55553cp-05f);
  c = fma_f32(c, r2, -0x1.000000p-01f);
  c = fma_f32(c, r2, 0x1.000000p+00f);
  float s = fma_f32(0x1.7d3bbcp-19f, r2, -0x1.a06bbap-13f);
  s = fma_f32(s, r2, 0x1.11119ap-07f);
  s = fma_f32(s, r2, -0x1.555556p-03f);
  s = fma_f32(s, r2, 0.0f);
  s = fma_f32(s, r, r);
  int iq = static_cast<int>(quadrant);
  if (cosine) iq += 1;
  const float v = (iq & 1) == 0 ? s : c;
  return (iq & 2) == 2 ? 0.0f - v : v;
}

std::string grid_text(int h, int w) { return std::to_string(h) + "x" + std::to_string(w); }

}  // namespace

float numpy_sinf(float x) { return numpy_sincos(x, false); }
float numpy_cosf(float x) { return numpy_sincos(x, true); }

std::vector<float> resample_pos_table(const std::vector<float>& table, int side, int channels, int h, int w) {
  if (side < 1 || channels < 1 || h < 1 || w < 1 ||
      table.size() != static_cast<size_t>(side) * side * channels) {
    throw Error("resample_pos_table: a " + grid_text(side, side) + " table of " + std::to_string(channels) +
                " channels (" + std::to_string(table.size()) + " values) cannot be resampled to a " +
                grid_text(h, w) + " patch grid");
  }
  if (h == side && w == side) return table;
  std::vector<float> x = table;
  if (w != side) x = pass(x, side, side, channels, w);  // along the columns: [side][side][C] -> [side][w][C]
  if (h != side) x = pass(x, 1, side, static_cast<int64_t>(w) * channels, h);  // along the rows
  return x;
}

std::vector<float> sincos_2d(int dim, int h, int w) {
  if (dim < 4 || dim % 4 != 0 || h < 1 || w < 1) {
    throw Error("sincos_2d: a table of dim " + std::to_string(dim) + " (a positive multiple of 4) for a " +
                grid_text(h, w) + " patch grid cannot be made");
  }
  const int half = dim / 2;        // the columns of one axis
  const int count = half / 2;      // the frequencies
  const float denominator = static_cast<float>(half / 2.0);
  std::vector<float> omega(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) {
    const float e = static_cast<float>(k) / denominator;
    omega[static_cast<size_t>(k)] = 1.0f / std::pow(10000.0f, e);  // powf, as numpy's float32 power
  }
  // One axis's [sin | cos] block for each position 0..n-1.
  auto axis = [&](int n) {
    std::vector<float> out(static_cast<size_t>(n) * half);
    for (int pos = 0; pos < n; ++pos) {
      float* o = &out[static_cast<size_t>(pos) * half];
      for (int k = 0; k < count; ++k) {
        const float angle = static_cast<float>(pos) * omega[static_cast<size_t>(k)];
        o[k] = numpy_sinf(angle);
        o[count + k] = numpy_cosf(angle);
      }
    }
    return out;
  };
  const std::vector<float> cols = axis(w), rows = axis(h);
  std::vector<float> emb(static_cast<size_t>(h) * w * dim);
  for (int i = 0; i < h; ++i) {
    for (int j = 0; j < w; ++j) {
      float* o = &emb[(static_cast<size_t>(i) * w + j) * dim];
      std::copy_n(&cols[static_cast<size_t>(j) * half], half, o);
      std::copy_n(&rows[static_cast<size_t>(i) * half], half, o + half);
    }
  }
  return emb;
}

}  // namespace minicpm_v2
}  // namespace gsurg
