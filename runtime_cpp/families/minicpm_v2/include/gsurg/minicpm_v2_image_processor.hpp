// The MiniCPM-V-2 image processor: from a decoded image to the vision net's inputs, exactly as the Python
// reference graphsurgeon/models/minicpm_v2/{slicing,processor}.py computes them (that reference is bit-exact
// with the official remote code under the official environment's Pillow 10.1.0; docs/minicpm-v-2.md §6).
//
// Contract:
//   - SliceConfig holds config.json's slicing settings (scale_resolution S, max_slice_nums, patch_size p);
//     from_json() reads them from an object with those three keys (positive integers; S and p up to 4096,
//     max_slice_nums up to 64) and throws gsurg::Error("image_processor: KEY must be ..., not VALUE").
//   - plan_slices() is slicing.plan_slices in IEEE double, operation for operation: the area ratio
//     W*H / S^2 (a correctly rounded quotient of exact integers), ceil, the candidate grids in the official
//     order, the first grid with the smallest abs(log(W/H) - log(cols/rows)) (a strict "<", logarithms of the
//     double quotients, as Python's math.log), best_resize's truncations int(S / sqrt(r)) and int(h * r),
//     ensure_divide with Python's round() (ties to even), the refine size from the ensure_divide'd cells.
//     It throws gsurg::Error for an empty image and for a plan with a side above 2^24 pixels (the resize's
//     limit; only images far past Pillow's decompression-bomb limit get there).
//   - preprocess() takes the image as decoded (Image::rgb is Pillow's convert("RGB"): alpha dropped, grey
//     and palette expanded; Image::alpha is ignored, as the reference never composites) and gives, for the
//     overview and then the slices row-major: the uint8 image (the overview and the refine image each
//     resized from the original with Pillow's BICUBIC, horizontal pass first as Pillow 10.1.0 runs it; the
//     slices are crops of the one refine image) and its float32 [3, H, W] pixels,
//     (float32(u8) / 255 - 0.5) / 0.5 with each division a true float32 division (ToTensor, Normalize).
//   - resize_h_then_v() is that resize on its own (processor.resize_h_then_v).
//   - Pixels::grid_h() / grid_w() are tgt_size (H / p, W / p); every side is a multiple of p.
//   - patch_rows() lays one image's pixels out as the vision net's patch-embedding input: [N, 3 * p * p]
//     with N = (H / p) * (W / p), row gy * (W / p) + gx for the patch at grid row gy and column gx, its
//     columns ordered (channel, ky, kx), so that the Conv2d weight [C, 3, p, p] flattened row-wise is a
//     matrix whose row-by-row dot product with a patch row is the convolution at that patch. Throws
//     gsurg::Error when H or W is not a positive multiple of p or the data does not match [3, H, W].
#pragma once

#include <array>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gsurg/image.hpp"
#include "gsurg/pixel_values.hpp"

namespace gsurg {
namespace minicpm_v2 {

struct SliceConfig {
  int scale_resolution = 448;
  int max_slice_nums = 9;
  int patch_size = 14;

  // Throws gsurg::Error("image_processor: <key> must be ...") on a bad or missing key.
  static SliceConfig from_json(const nlohmann::json& j);
};

// Where an image of width x height goes. Sizes are width x height, as Pillow gives them.
struct SlicePlan {
  int width = 0, height = 0;                    // the image
  int overview_width = 0, overview_height = 0;  // the overview ("source") image
  bool sliced = false;                          // false: the overview only
  int grid_cols = 0, grid_rows = 0;             // the slices' grid when sliced
  int refine_width = 0, refine_height = 0;      // the image the slices are cropped from, when sliced

  int slice_width() const { return sliced ? refine_width / grid_cols : 0; }
  int slice_height() const { return sliced ? refine_height / grid_rows : 0; }
  int image_count() const { return 1 + (sliced ? grid_cols * grid_rows : 0); }
  // The crop boxes (left, top, right, bottom) of the slices in the refine image, row-major.
  std::vector<std::array<int, 4>> slice_boxes() const;
};

// One image the vision net sees, normalised: data is float32 [3, height, width], channel-planar.
struct Pixels {
  int height = 0, width = 0, patch_size = 14;
  std::vector<float> data;

  int grid_h() const { return height / patch_size; }
  int grid_w() const { return width / patch_size; }
};

// An image's inputs: resized[i] (uint8 RGB) and pixels[i] for image i, the overview first, then the slices
// row-major.
struct Processed {
  SlicePlan plan;
  std::vector<Image> resized;
  std::vector<Pixels> pixels;
};

SlicePlan plan_slices(int width, int height, const SliceConfig& cfg);

// Pillow 10.1.0's resize((width, height), BICUBIC) of an RGB image: the horizontal pass first (when the width
// changes), then the vertical one (when the height changes), each Pillow's fixed-point pass with a uint8
// result; throws gsurg::Error on bad sizes, as resize_bicubic().
Image resize_h_then_v(const Image& src, int width, int height);

Processed preprocess(const Image& image, const SliceConfig& cfg);

// One image's pixels as rows of patches, [grid_h * grid_w, 3 * p * p] (PixelValues: grid in patches).
PixelValues patch_rows(const Pixels& pixels);

}  // namespace minicpm_v2
}  // namespace gsurg
