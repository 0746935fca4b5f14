// The Qwen3-VL image processor: from a decoded image to the vision tower's pixel_values, exactly as HF
// transformers 5.24's Qwen2VLImageProcessorPil (models/qwen2_vl/image_processing_pil_qwen2_vl.py) computes
// them from the same file opened with Pillow (transparency included).
//
// Contract:
//   - Qwen3VlImageConfig::from_json() reads model.json's "image_processor" object (written by
//     graphsurgeon/models/qwen3_vl/model.json.j2): patch_size, temporal_patch_size, merge_size, factor (must equal
//     patch_size * merge_size), min_pixels <= max_pixels (positive integers up to 2^53), max_aspect_ratio
//     (>= 1), image_mean, image_std (positive), rescale_factor (positive), resample ("bicubic" only) and
//     do_convert_rgb (optional, default true). Anything else throws gsurg::Error("image_processor: KEY must
//     be ..., not VALUE").
//   - qwen3vl_smart_resize() is HF's smart_resize in float64 in its order: Python's round() (ties to even)
//     of height / factor, then on the over-budget path floor(side / sqrt(h*w / max_pixels) / factor) but at
//     least factor, on the under-budget path ceil(side * sqrt(min_pixels / (h*w)) / factor). It throws
//     gsurg::Error when max(h, w) / min(h, w) exceeds max_aspect_ratio (HF's fixed 200), and when a side is
//     smaller than one patch: HF 5.24 would upscale such an image, the runtime refuses it as a bad input.
//   - qwen3vl_preprocess() resizes with resize_bicubic() (Pillow BICUBIC of the uint8 image), rescales as
//     float32(u8 * rescale_factor) computed in float64, normalises as (x - float32(mean)) / float32(std) in
//     float32, and patchifies as HF: grid_h = H / patch_size, grid_w = W / patch_size (PixelValues' grid
//     is in patches), patches in merge-block order (block row bh, block column bw, then mh, mw within the
//     merge x merge block: patch row bh*merge+mh, column bw*merge+mw), each patch 3 * T * P * P values
//     ordered (channel, t, ky, kx) with the one frame repeated for t = 0..T-1 (T = temporal_patch_size).
//   - With do_convert_rgb (Qwen3-VL's default) an image with transparency (a non-empty Image::alpha, see
//     gsurg/image.hpp: an alpha band or a tRNS chunk) is first composited onto opaque white by
//     composite_on_white(), as HF 5.24's PilBackend.process_image does through image_transforms.
//     convert_to_rgb: image.convert("RGBA"), Image.alpha_composite(white, that), convert("RGB"), all in
//     Pillow's integer arithmetic, before the resize. An image without transparency is used as decoded.
//     Without do_convert_rgb only an "RGB" image is accepted and its alpha (a tRNS colour) is ignored, as HF
//     then takes np.array(image). Not every family's processor composites (Penguin-VL's reference is
//     convert("RGB")).
#pragma once

#include <array>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "gsurg/image.hpp"
#include "gsurg/pixel_values.hpp"

namespace gsurg {

struct Qwen3VlImageConfig {
  int patch_size = 16, temporal_patch_size = 2, merge_size = 2;
  int64_t min_pixels = 0, max_pixels = 0;
  double max_aspect_ratio = 200;
  double rescale_factor = 1.0 / 255.0;
  std::array<double, 3> image_mean{{0.5, 0.5, 0.5}};
  std::array<double, 3> image_std{{0.5, 0.5, 0.5}};
  bool do_convert_rgb = true;

  int factor() const { return patch_size * merge_size; }

  // Throws gsurg::Error("image_processor: <key> must be ...") on a bad or missing key.
  static Qwen3VlImageConfig from_json(const nlohmann::json& j);
};

// HF's smart_resize: the resize target (multiples of factor()) for an image of height x width pixels.
TargetSize qwen3vl_smart_resize(int height, int width, const Qwen3VlImageConfig& cfg);

// Resize to qwen3vl_smart_resize(), normalise and patchify.
PixelValues qwen3vl_preprocess(const Image& image, const Qwen3VlImageConfig& cfg);

// The same with the resize target given (a positive multiple of factor() on each side); for tests and tools.
PixelValues qwen3vl_preprocess_at(const Image& image, const Qwen3VlImageConfig& cfg, TargetSize size);

}  // namespace gsurg
