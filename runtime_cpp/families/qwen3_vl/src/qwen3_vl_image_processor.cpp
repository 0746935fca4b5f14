// The Qwen3-VL image processor (see gsurg/qwen3_vl_image_processor.hpp): the model.json "image_processor"
// reader, HF's smart_resize (transformers 5.24, models/qwen2_vl/image_processing_pil_qwen2_vl.py) and
// rescale + normalise + HF's patchify (merge-block patch order, the frame repeated temporal_patch_size
// times).
#include "gsurg/qwen3_vl_image_processor.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "gsurg/processor_common.hpp"
#include "gsurg/error.hpp"

namespace gsurg {

namespace {

using processor::bad;
using processor::find;
using processor::get_bool;
using processor::round_half_even;

const char* const kWhere = "image_processor";
constexpr int64_t kMaxExact = int64_t{1} << 53;  // integers a double holds exactly

// A required integer in [minimum, maximum] (JSON booleans and floats such as 16.0 are refused).
int64_t get_int(const nlohmann::json& j, const char* key, int64_t minimum, int64_t maximum) {
  const nlohmann::json* v = find(j, key);
  const std::string what = "an integer from " + std::to_string(minimum) + " to " + std::to_string(maximum);
  if (v == nullptr || !v->is_number_integer()) bad(key, what, v);
  const int64_t n = v->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                                  v->get<uint64_t>(), static_cast<uint64_t>(INT64_MAX)))
                                            : v->get<int64_t>();
  if (n < minimum || n > maximum) bad(key, what, v);
  return n;
}

double get_number(const nlohmann::json& j, const char* key, double minimum, const char* what) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr || !v->is_number() || !(v->get<double>() >= minimum) || !std::isfinite(v->get<double>())) {
    bad(key, what, v);
  }
  return v->get<double>();
}

std::array<double, 3> get_triple(const nlohmann::json& j, const char* key, bool positive) {
  const nlohmann::json* v = find(j, key);
  const char* what = positive ? "three positive numbers" : "three numbers";
  if (v == nullptr || !v->is_array() || v->size() != 3) bad(key, what, v);
  std::array<double, 3> out{};
  for (size_t i = 0; i < 3; ++i) {
    if (!(*v)[i].is_number()) bad(key, what, v);
    out[i] = (*v)[i].get<double>();
    if (!std::isfinite(out[i]) || (positive && !(out[i] > 0))) bad(key, what, v);
  }
  return out;
}

// The shortest decimal that reads back as x, all its integer digits written out (250, not 2.5e+02) up to
// 17 of them (as Python prints a float, without its trailing ".0").
std::string shortest(double x) {
  char text[40];
  const double digits = std::fabs(x) >= 1 ? std::floor(std::log10(std::fabs(x))) + 1 : 1;
  for (int precision = static_cast<int>(std::min(digits, 17.0)); precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, x);
    if (std::strtod(text, nullptr) == x) break;
  }
  return text;
}

std::string pixels(int height, int width) {
  return std::to_string(width) + "x" + std::to_string(height) + " pixels";
}

}  // namespace

Qwen3VlImageConfig Qwen3VlImageConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error(std::string(kWhere) + ": must be a JSON object, not " + j.dump());
  Qwen3VlImageConfig cfg;
  cfg.patch_size = static_cast<int>(get_int(j, "patch_size", 1, 4096));
  cfg.temporal_patch_size = static_cast<int>(get_int(j, "temporal_patch_size", 1, 64));
  cfg.merge_size = static_cast<int>(get_int(j, "merge_size", 1, 64));
  const int64_t factor = get_int(j, "factor", 1, INT32_MAX);
  if (factor != cfg.factor()) {
    bad("factor", "patch_size * merge_size = " + std::to_string(cfg.factor()), find(j, "factor"));
  }
  cfg.min_pixels = get_int(j, "min_pixels", 1, kMaxExact);
  cfg.max_pixels = get_int(j, "max_pixels", 1, kMaxExact);
  if (cfg.min_pixels > cfg.max_pixels) {
    bad("min_pixels", "at most max_pixels " + std::to_string(cfg.max_pixels), find(j, "min_pixels"));
  }
  cfg.max_aspect_ratio = get_number(j, "max_aspect_ratio", 1.0, "a number >= 1");
  cfg.image_mean = get_triple(j, "image_mean", false);
  cfg.image_std = get_triple(j, "image_std", true);
  cfg.rescale_factor = get_number(j, "rescale_factor", 0.0, "a positive number");
  if (!(cfg.rescale_factor > 0)) bad("rescale_factor", "a positive number", find(j, "rescale_factor"));
  const nlohmann::json* resample = find(j, "resample");
  if (resample == nullptr || !resample->is_string() || resample->get<std::string>() != "bicubic") {
    bad("resample", "\"bicubic\" (the only filter supported)", resample);
  }
  cfg.do_convert_rgb = get_bool(j, "do_convert_rgb", true);
  return cfg;
}

TargetSize qwen3vl_smart_resize(int height, int width, const Qwen3VlImageConfig& cfg) {
  if (height < 1 || width < 1) throw Error("an image of " + pixels(height, width) + " cannot be resized");
  const double ratio =
      static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (ratio > cfg.max_aspect_ratio) {
    throw Error("an image of " + pixels(height, width) + " has aspect ratio " + shortest(ratio) +
                ", above max_aspect_ratio " + shortest(cfg.max_aspect_ratio) +
                " (image_processor.max_aspect_ratio)");
  }
  // HF 5.24 would upscale an image narrower than a patch (its round() gives 0, then the min_pixels branch);
  // the runtime takes that for a bad input instead of inventing most of the pixels.
  if (height < cfg.patch_size || width < cfg.patch_size) {
    throw Error("an image of " + pixels(height, width) + " is smaller than one patch (" +
                std::to_string(cfg.patch_size) + " pixels, image_processor.patch_size) on a side");
  }
  const int64_t area = static_cast<int64_t>(height) * width;  // Python's int product
  if (area > kMaxExact) {  // beyond 2^53 a double would round it before Python's exact int / int division
    throw Error("an image of " + pixels(height, width) + " is too large");
  }
  const int64_t factor = cfg.factor();
  const double f = static_cast<double>(factor);
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  // h / factor and w / factor are exact-operand float64 divisions, as Python's int / int.
  int64_t h_bar = static_cast<int64_t>(round_half_even(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(round_half_even(w / f)) * factor;
  if (h_bar * w_bar > cfg.max_pixels) {
    const double beta = std::sqrt(static_cast<double>(area) / static_cast<double>(cfg.max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < cfg.min_pixels) {
    const double beta = std::sqrt(static_cast<double>(cfg.min_pixels) / static_cast<double>(area));
    const double h_up = std::ceil(h * beta / f), w_up = std::ceil(w * beta / f);
    if (h_up * f > INT32_MAX / 2 || w_up * f > INT32_MAX / 2) {
      throw Error("the resize target for an image of " + pixels(height, width) + " is too large");
    }
    h_bar = static_cast<int64_t>(h_up) * factor;
    w_bar = static_cast<int64_t>(w_up) * factor;
  }
  if (h_bar > INT32_MAX / 2 || w_bar > INT32_MAX / 2) {
    throw Error("the resize target for an image of " + pixels(height, width) + " is too large");
  }
  return TargetSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

PixelValues qwen3vl_preprocess(const Image& image, const Qwen3VlImageConfig& cfg) {
  return qwen3vl_preprocess_at(image, cfg, qwen3vl_smart_resize(image.height, image.width, cfg));
}

PixelValues qwen3vl_preprocess_at(const Image& image, const Qwen3VlImageConfig& cfg, TargetSize size) {
  if (image.mode != "RGB" && !cfg.do_convert_rgb) {
    throw Error("an image in mode " + image.mode + " needs do_convert_rgb");
  }
  const int p = cfg.patch_size, m = cfg.merge_size, t_count = cfg.temporal_patch_size;
  const int f = cfg.factor();
  if (size.height < f || size.width < f || size.height % f != 0 || size.width % f != 0) {
    throw Error("the resize target " + std::to_string(size.height) + "x" + std::to_string(size.width) +
                " is not a positive multiple of patch_size * merge_size " + std::to_string(f));
  }
  // HF's convert_to_rgb (do_convert_rgb) composites a transparent image onto white before resizing; without
  // do_convert_rgb HF takes np.array() of the RGB image as it is, its tRNS unused.
  Image flattened;
  const Image* source = &image;
  if (cfg.do_convert_rgb && !image.alpha.empty()) {
    flattened = composite_on_white(image);
    source = &flattened;
  }
  const Image resized = resize_bicubic(*source, size.width, size.height);
  // float32(u8 * rescale_factor) computed in float64, then (x - mean) / std in float32: 256 values a channel.
  const processor::NormaliseTable lut =
      processor::normalise_table(cfg.rescale_factor, cfg.image_mean, cfg.image_std);
  PixelValues out;
  out.grid_h = size.height / p;
  out.grid_w = size.width / p;
  const size_t frame = static_cast<size_t>(p) * p;  // one channel of one frame of a patch
  out.patch_dim = 3 * t_count * p * p;
  out.data.resize(static_cast<size_t>(out.grid_h) * out.grid_w * out.patch_dim);
  const size_t stride = static_cast<size_t>(size.width) * 3;
  float* o = out.data.data();
  for (int bh = 0; bh < out.grid_h / m; ++bh) {
    for (int bw = 0; bw < out.grid_w / m; ++bw) {
      for (int mh = 0; mh < m; ++mh) {
        for (int mw = 0; mw < m; ++mw) {
          const size_t row = static_cast<size_t>(bh) * m + mh, col = static_cast<size_t>(bw) * m + mw;
          for (int ch = 0; ch < 3; ++ch) {
            float* first = o;
            for (int ky = 0; ky < p; ++ky) {
              const uint8_t* px = &resized.rgb[(row * p + ky) * stride + col * p * 3];
              for (int kx = 0; kx < p; ++kx) *o++ = lut[ch][px[kx * 3 + ch]];
            }
            for (int t = 1; t < t_count; ++t) o = std::copy(first, first + frame, o);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace gsurg
