// Images for the Penguin-VL runtime: decoding PNG and JPEG files to RGB8 exactly as the Python reference
// (examples/penguin_vl/processor.py: Pillow's Image.open + convert("RGB")) gets them, and Pillow's BICUBIC
// resize reproduced bit for bit.
//
// Contract:
//   - load_image() detects the format by its magic bytes (never the extension) and decodes PNG with libpng,
//     JPEG with libjpeg(-turbo) at its defaults (islow DCT, fancy upsampling), as Pillow does. The pixels are
//     then turned into RGB as Pillow's convert("RGB") turns the mode Pillow opens the file in:
//       PNG grey 1/2/4/8-bit -> (v, v, v) after scaling to 0..255; grey 16-bit (Pillow "I;16") -> min(v, 255);
//       grey+alpha and RGBA -> alpha dropped (never composited); 16-bit samples -> their high byte;
//       palette -> palette lookup, a transparency chunk ignored, indices past the PLTE entries -> black;
//       JPEG grey -> (v, v, v); YCbCr/RGB -> libjpeg's RGB; CMYK/YCCK -> Pillow's inverted-CMYK to RGB.
//     Anything else (another format, a corrupt or truncated file, a 12-bit JPEG) throws pvl::Error naming
//     the path. Image::mode records the Pillow mode the file opened in ("RGB", "RGBA", "L", "P", ...).
//   - resize_bicubic() is Pillow's Image.resize((w, h), BICUBIC) for an RGB image (src/libImaging/
//     Resample.c): a = -0.5 cubic, support scaled by in/out when shrinking, coefficients normalised and held
//     in 22-bit fixed point, +0.5 rounding and clipping to 0..255, two passes with a uint8 intermediate in
//     Pillow 13's order (vertical first only when the height loses more than twice as many pixels as the
//     width), a pass skipped when its dimension is unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pvl {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // RGB8, row-major, 3 bytes per pixel
  std::string mode = "RGB";  // the Pillow mode the file was decoded in, before the conversion to RGB
};

// Reads and decodes a PNG or JPEG file (UTF-8 path) into RGB; throws pvl::Error naming the path.
Image load_image(const std::string& path);

// The same for a file already in memory; `name` is used in error messages.
Image decode_image(const std::string& bytes, const std::string& name);

// Pillow-exact BICUBIC resize of an RGB image to width x height (both >= 1); throws pvl::Error on bad sizes.
Image resize_bicubic(const Image& src, int width, int height);

}  // namespace pvl
