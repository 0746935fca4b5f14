// Internal to gsurg_preprocess: the per-format decoders behind decode_image(). Each takes the whole file in
// memory and returns the image already converted to RGB the way Pillow's convert("RGB") converts the mode
// Pillow opens that file in (see gsurg/image.hpp); each throws gsurg::Error("<name>: ...") on any failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gsurg/image.hpp"

namespace gsurg {
namespace detail {

// The largest image accepted: Pillow refuses more than 2 * Image.MAX_IMAGE_PIXELS (89,478,485) pixels as a
// decompression bomb; the same limit keeps every size computation far from overflow.
constexpr uint64_t kMaxPixels = 2ull * 89478485ull;

Image decode_png(const uint8_t* data, size_t size, const std::string& name);
Image decode_jpeg(const uint8_t* data, size_t size, const std::string& name);

}  // namespace detail
}  // namespace gsurg
