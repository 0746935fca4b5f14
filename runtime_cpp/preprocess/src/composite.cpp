// composite_on_white() (see gsurg/image.hpp): HF transformers' convert_to_rgb for an image with transparency,
// Image.alpha_composite(white RGBA, image.convert("RGBA")).convert("RGB"), in Pillow's integer arithmetic
// (libImaging/AlphaComposite.c: 7 extra bits of precision, divisions by 255 as ((x >> 8) + x) >> 8).
#include <cstddef>
#include <cstdint>

#include "gsurg/error.hpp"
#include "gsurg/image.hpp"

namespace gsurg {

namespace {

constexpr uint32_t kPrecisionBits = 7;

uint32_t shift_div255(uint32_t x) { return ((x >> 8) + x) >> 8; }

}  // namespace

Image composite_on_white(const Image& image) {
  const size_t count = static_cast<size_t>(image.width) * static_cast<size_t>(image.height);
  if (image.rgb.size() != count * 3 || (!image.alpha.empty() && image.alpha.size() != count)) {
    throw Error("composite_on_white: the pixel buffers do not match the image size");
  }
  Image out;
  out.width = image.width;
  out.height = image.height;
  out.mode = "RGB";
  out.rgb = image.rgb;
  if (image.alpha.empty()) return out;
  // AlphaComposite.c with dst = (255, 255, 255, 255) and src = the image: a transparent pixel is dst's.
  const uint32_t dst = 255, dst_a = 255;
  uint8_t* o = out.rgb.data();
  for (size_t i = 0; i < count; ++i, o += 3) {
    const uint32_t a = image.alpha[i];
    if (a == 0) {
      o[0] = o[1] = o[2] = static_cast<uint8_t>(dst);
      continue;
    }
    const uint32_t blend = dst_a * (255 - a);
    const uint32_t out_a255 = a * 255 + blend;
    const uint32_t coef1 = a * 255 * 255 * (1u << kPrecisionBits) / out_a255;
    const uint32_t coef2 = 255 * (1u << kPrecisionBits) - coef1;
    for (int c = 0; c < 3; ++c) {
      const uint32_t mixed = o[c] * coef1 + dst * coef2;
      o[c] = static_cast<uint8_t>(shift_div255(mixed + (0x80u << kPrecisionBits)) >> kPrecisionBits);
    }
  }
  return out;
}

}  // namespace gsurg
