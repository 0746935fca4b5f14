// The Penguin-VL image processor (see gsurg/penguin_vl_image_processor.hpp): the preprocessor_config.json reader with
// the reference's validation (graphsurgeon/models/penguin_vl/config.py processor_from_dict), the official resize
// arithmetic (processor.py resize_target) and normalise + patchify (processor.py preprocess/patchify).
#include "gsurg/penguin_vl_image_processor.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
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

int get_int(const nlohmann::json& j, const char* key, int minimum, const int* fallback = nullptr) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr && fallback != nullptr) return *fallback;
  const std::string what = "an integer >= " + std::to_string(minimum);
  if (v == nullptr || !v->is_number_integer()) bad(key, what, v);
  const int64_t n = v->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                                  v->get<uint64_t>(), static_cast<uint64_t>(INT32_MAX)))
                                            : v->get<int64_t>();
  if (n < minimum || n > INT32_MAX) bad(key, what, v);
  return static_cast<int>(n);
}

double get_positive(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr || !v->is_number() || !(v->get<double>() > 0)) bad(key, "a positive number", v);
  return v->get<double>();
}

std::array<double, 3> get_triple(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr || !v->is_array() || v->size() != 3) bad(key, "three numbers", v);
  std::array<double, 3> out{};
  for (size_t i = 0; i < 3; ++i) {
    if (!(*v)[i].is_number()) bad(key, "three numbers", v);
    out[i] = (*v)[i].get<double>();
  }
  return out;
}

}  // namespace

PenguinVlImageConfig PenguinVlImageConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error(std::string(kWhere) + ": must be a JSON object, not " + j.dump());
  for (const char* key : {"do_resize", "do_rescale", "do_normalize"}) {
    if (!get_bool(j, key, true)) throw Error(std::string(kWhere) + ": " + key + " false is not supported");
  }
  PenguinVlImageConfig cfg;
  const int one = 1;
  cfg.merge_size = get_int(j, "merge_size", 1, &one);
  if (cfg.merge_size != 1) {
    throw Error(std::string(kWhere) + ": merge_size " + std::to_string(cfg.merge_size) +
                " is not supported for images (only 1)");
  }
  cfg.image_mean = get_triple(j, "image_mean");
  cfg.image_std = get_triple(j, "image_std");
  for (double s : cfg.image_std) {
    if (!(s > 0)) bad("image_std", "three positive numbers", find(j, "image_std"));
  }
  cfg.resample = get_int(j, "resample", 0);
  if (cfg.resample != 3) {
    throw Error(std::string(kWhere) + ": resample " + std::to_string(cfg.resample) +
                " is not supported (only 3, PIL BICUBIC)");
  }
  cfg.min_tokens = get_int(j, "min_tokens", 1);
  cfg.max_tokens = get_int(j, "max_tokens", 1);
  if (cfg.min_tokens > cfg.max_tokens) {
    throw Error(std::string(kWhere) + ": min_tokens " + std::to_string(cfg.min_tokens) +
                " exceeds max_tokens " + std::to_string(cfg.max_tokens));
  }
  cfg.patch_size = get_int(j, "patch_size", 1);
  if (cfg.patch_size > 4096) bad("patch_size", "an integer from 1 to 4096", find(j, "patch_size"));
  cfg.rescale_factor = get_positive(j, "rescale_factor");
  cfg.do_convert_rgb = get_bool(j, "do_convert_rgb", true);
  return cfg;
}

TargetSize penguin_vl_target_size(int height, int width, const PenguinVlImageConfig& cfg) {
  if (height < 1 || width < 1) {
    throw Error("an image of " + std::to_string(width) + "x" + std::to_string(height) +
                " pixels cannot be resized");
  }
  const int64_t factor = cfg.factor();
  // The reference's order: int products, then one float multiply; area stays an int until capped.
  const double min_pixels = static_cast<double>(cfg.min_tokens * factor * factor) * 1.5;
  const double max_pixels = static_cast<double>(cfg.max_tokens * factor * factor) * 0.95;
  const double aspect = static_cast<double>(height) / static_cast<double>(width);
  double area = static_cast<double>(static_cast<int64_t>(height) * width);  // exact: < 2^53
  if (area > max_pixels) {
    area = max_pixels;
    if (area < min_pixels) area = min_pixels;
  }
  const double w_new = std::sqrt(area / aspect);
  const double h_new = w_new * aspect;
  const double f = static_cast<double>(factor);
  double h_bar = std::fmax(round_half_even(h_new / f) * f, f);
  double w_bar = std::fmax(round_half_even(w_new / f) * f, f);
  if (h_bar * w_bar < min_pixels) {  // both products are exact integers in a double
    const double w_min = std::sqrt(min_pixels / aspect);
    const double h_min = w_min * aspect;
    h_bar = std::ceil(h_min / f) * f;
    w_bar = std::ceil(w_min / f) * f;
  }
  if (h_bar > INT32_MAX / 2 || w_bar > INT32_MAX / 2) {
    throw Error("the resize target for a " + std::to_string(width) + "x" + std::to_string(height) +
                " image is too large");
  }
  return TargetSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

PixelValues penguin_vl_preprocess(const Image& image, const PenguinVlImageConfig& cfg) {
  return penguin_vl_preprocess_at(image, cfg, penguin_vl_target_size(image.height, image.width, cfg));
}

PixelValues penguin_vl_preprocess_at(const Image& image, const PenguinVlImageConfig& cfg, TargetSize size) {
  if (image.mode != "RGB" && !cfg.do_convert_rgb) {
    throw Error("an image in mode " + image.mode + " needs do_convert_rgb");
  }
  const int p = cfg.patch_size;
  if (size.height < p || size.width < p || size.height % p != 0 || size.width % p != 0) {
    throw Error("the resize target " + std::to_string(size.height) + "x" + std::to_string(size.width) +
                " is not a positive multiple of the patch size " + std::to_string(p));
  }
  const Image resized = resize_bicubic(image, size.width, size.height);
  // float32(u8 * rescale_factor) computed in float64, then (x - mean) / std in float32: 256 values a channel.
  const processor::NormaliseTable lut =
      processor::normalise_table(cfg.rescale_factor, cfg.image_mean, cfg.image_std);
  PixelValues out;
  out.grid_h = size.height / p;
  out.grid_w = size.width / p;
  out.patch_dim = 3 * p * p;
  out.data.resize(static_cast<size_t>(out.grid_h) * out.grid_w * out.patch_dim);
  const size_t stride = static_cast<size_t>(size.width) * 3;
  float* o = out.data.data();
  for (int r = 0; r < out.grid_h; ++r) {
    for (int c = 0; c < out.grid_w; ++c) {
      for (int ch = 0; ch < 3; ++ch) {
        for (int ky = 0; ky < p; ++ky) {
          const uint8_t* px = &resized.rgb[(static_cast<size_t>(r) * p + ky) * stride + static_cast<size_t>(c) * p * 3];
          for (int kx = 0; kx < p; ++kx) *o++ = lut[ch][px[kx * 3 + ch]];
        }
      }
    }
  }
  return out;
}

}  // namespace gsurg
