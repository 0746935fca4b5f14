// Pillow's Image.resize((w, h), Image.BICUBIC) for RGB images, bit for bit (Pillow 13, src/PIL/Image.py
// resize() and src/libImaging/Resample.c, read for the arithmetic; this is an independent implementation).
//
// Facts reproduced:
//   - Image.resize returns a copy when the size is unchanged; the whole image is the box (0, 0, w, h), so
//     a pass runs only when its dimension changes (need_horizontal / need_vertical).
//   - Coefficients per output index (precompute_coeffs): scale = in/out (in as float minus the float box
//     origin 0, then in double), filterscale = max(scale, 1), support = 2 * filterscale,
//     ksize = ceil(support) * 2 + 1, center = (i + 0.5) * scale, first = (int)(center - support + 0.5)
//     clipped to >= 0, last = (int)(center + support + 0.5) clipped to <= in, weights
//     bicubic((j + first - center + 0.5) * (1 / filterscale)) with a = -0.5, divided by their sum when it is
//     non-zero, then fixed point: (int)(w * 2^22 +/- 0.5) (PRECISION_BITS = 32 - 8 - 2 = 22).
//   - Each pass sums uint8 * coefficient in int32 starting from 2^21 (the +0.5), and clip8 takes
//     (sum >> 22) clipped to 0..255.
//   - Order (Pillow 13, ImagingResampleInner): the vertical pass runs first when the height shrinks by more
//     than twice as many pixels as the width does, (in_h - out_h) > 0 && (in_h - out_h) > 2 * (in_w - out_w)
//     (so always when the height shrinks and the width grows); otherwise the horizontal pass runs first, over
//     only the source rows the vertical pass reads (an optimisation with the same result). Either way the
//     intermediate image is uint8. Pillow 12.2-12.3 instead went vertical first only for images taller
//     than 100x their width, in Python; 12.1 and older always went horizontal first.
// The arithmetic is kept in the written order; the build turns off floating-point contraction (FMA) so the
// doubles round as Pillow's x86-64 build rounds them.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gsurg/error.hpp"
#include "gsurg/image.hpp"

namespace gsurg {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  const double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;  // per output index: first source index and number of taps
  std::vector<int32_t> k;         // [out][ksize] fixed-point weights
};

Coeffs precompute(int in_size, int out_size) {
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  double filterscale = scale;
  if (filterscale < 1.0) filterscale = 1.0;
  const double support = 2.0 * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  const double inv_filterscale = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = bicubic((x + xmin - center + 0.5) * inv_filterscale);
      ww += w[x];
    }
    if (ww != 0.0) {
      for (int x = 0; x < xmax; ++x) w[x] /= ww;
    }
    int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double scaled = w[x] * (1 << kPrecisionBits);
      k[x] = static_cast<int32_t>(w[x] < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t sum) {
  if (sum < 0) return 0;  // (sum >> 22) < 0
  const int32_t v = sum >> kPrecisionBits;
  return static_cast<uint8_t>(v > 255 ? 255 : v);
}

// Rows [row0, row0 + rows) of src (width in_w) resampled horizontally to out_w pixels.
std::vector<uint8_t> horizontal(const uint8_t* src, int in_w, int row0, int rows, int out_w) {
  const Coeffs c = precompute(in_w, out_w);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * out_w * 3);
  for (int y = 0; y < rows; ++y) {
    const uint8_t* line = src + static_cast<size_t>(row0 + y) * in_w * 3;
    uint8_t* o = &out[static_cast<size_t>(y) * out_w * 3];
    for (int xx = 0; xx < out_w; ++xx) {
      const int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
      const uint8_t* p = line + static_cast<size_t>(c.first[xx]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[xx]; ++x, p += 3) {
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      o[xx * 3 + 0] = clip8(s0);
      o[xx * 3 + 1] = clip8(s1);
      o[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

// src is `width` pixels wide; output row yy reads rows first[yy] - shift ... of src.
std::vector<uint8_t> vertical(const uint8_t* src, int width, const Coeffs& c, int shift, int out_h) {
  const size_t stride = static_cast<size_t>(width) * 3;
  std::vector<uint8_t> out(stride * out_h);
  std::vector<int32_t> acc(stride);
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &c.k[static_cast<size_t>(yy) * c.ksize];
    acc.assign(stride, 1 << (kPrecisionBits - 1));
    for (int y = 0; y < c.count[yy]; ++y) {
      const uint8_t* line = src + static_cast<size_t>(c.first[yy] - shift + y) * stride;
      const int32_t ky = k[y];
      for (size_t i = 0; i < stride; ++i) acc[i] += line[i] * ky;
    }
    uint8_t* o = &out[static_cast<size_t>(yy) * stride];
    for (size_t i = 0; i < stride; ++i) o[i] = clip8(acc[i]);
  }
  return out;
}

}  // namespace

Image resize_bicubic(const Image& src, int width, int height) {
  if (width < 1 || height < 1 || width > (1 << 24) || height > (1 << 24)) {
    throw Error("resize_bicubic: cannot resize to " + std::to_string(width) + "x" + std::to_string(height));
  }
  if (src.width < 1 || src.height < 1 ||
      src.rgb.size() != static_cast<size_t>(src.width) * src.height * 3) {
    throw Error("resize_bicubic: the source image is empty or its pixel buffer does not match its size");
  }
  Image out;
  out.width = width;
  out.height = height;
  out.mode = "RGB";
  const bool need_h = width != src.width;
  const bool need_v = height != src.height;
  if (!need_h && !need_v) {
    out.rgb = src.rgb;
    return out;
  }
  if (!need_v) {
    out.rgb = horizontal(src.rgb.data(), src.width, 0, src.height, width);
    return out;
  }
  const Coeffs cv = precompute(src.height, height);
  const int64_t shrink_h = static_cast<int64_t>(src.height) - height;
  const int64_t shrink_w = static_cast<int64_t>(src.width) - width;
  const bool vertical_first = shrink_h > 0 && shrink_h > shrink_w * 2;
  if (need_h && vertical_first) {
    const std::vector<uint8_t> tmp = vertical(src.rgb.data(), src.width, cv, 0, height);
    out.rgb = horizontal(tmp.data(), src.width, 0, height, width);
  } else if (need_h) {
    const int row_first = cv.first[0];
    const int row_last = cv.first[height - 1] + cv.count[height - 1];
    const std::vector<uint8_t> tmp =
        horizontal(src.rgb.data(), src.width, row_first, row_last - row_first, width);
    out.rgb = vertical(tmp.data(), width, cv, row_first, height);
  } else {
    out.rgb = vertical(src.rgb.data(), width, cv, 0, height);
  }
  return out;
}

}  // namespace gsurg
