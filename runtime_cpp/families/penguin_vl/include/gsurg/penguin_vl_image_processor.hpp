// The Penguin-VL image processor: from an RGB image to the vision tower's pixel_values, exactly as the
// Python reference (graphsurgeon/models/penguin_vl/processor.py, penguin-vl.md §7) computes them.
//
// Contract:
//   - PenguinVlImageConfig::from_json() reads a preprocessor_config.json object (model.json's
//     "image_processor" is that file verbatim) with the reference's validation: do_resize/do_rescale/
//     do_normalize must be true, merge_size 1, resample 3 (BICUBIC), min_tokens <= max_tokens, positive
//     rescale_factor and image_std; anything else throws gsurg::Error naming the key.
//   - penguin_vl_target_size() is the official resize arithmetic in float64 in the reference's order, with Python's
//     round() (ties to even) and ceil on the minimum-area path.
//   - penguin_vl_preprocess() resizes with resize_bicubic(), rescales as float32(u8 * rescale_factor) computed in
//     float64, normalises as (x - mean) / std in float32, and patchifies: patch p = r * grid_w + c, each
//     patch an R, a G and a B block of patch x patch row-major values (element ch*p*p + ky*p + kx).
#pragma once

#include <array>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gsurg/image.hpp"
#include "gsurg/pixel_values.hpp"

namespace gsurg {

struct PenguinVlImageConfig {
  int patch_size = 14;
  int merge_size = 1;
  int min_tokens = 16;
  int max_tokens = 16384;
  int resample = 3;
  double rescale_factor = 1.0 / 255.0;
  std::array<double, 3> image_mean{{0.5, 0.5, 0.5}};
  std::array<double, 3> image_std{{0.5, 0.5, 0.5}};
  bool do_convert_rgb = true;

  int factor() const { return patch_size * merge_size; }

  // Throws gsurg::Error("image_processor: <key> ...") on a bad or missing key.
  static PenguinVlImageConfig from_json(const nlohmann::json& j);
};

// The official target size (multiples of factor()) for an image of height x width pixels.
TargetSize penguin_vl_target_size(int height, int width, const PenguinVlImageConfig& cfg);

// Resize to penguin_vl_target_size(), normalise and patchify.
PixelValues penguin_vl_preprocess(const Image& image, const PenguinVlImageConfig& cfg);

// The same with the resize target given (a multiple of patch_size on each side); for tests and tools.
PixelValues penguin_vl_preprocess_at(const Image& image, const PenguinVlImageConfig& cfg, TargetSize size);

}  // namespace gsurg
