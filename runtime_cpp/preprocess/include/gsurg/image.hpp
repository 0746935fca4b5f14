// Images for the runtime: decoding PNG and JPEG files to RGB8 exactly as the Python references get them
// (Pillow's Image.open + convert("RGB")), and Pillow's BICUBIC
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
//     Anything else (another format, a corrupt or truncated file, a 12-bit JPEG) throws gsurg::Error naming
//     the path. Image::mode records the Pillow mode the file opened in ("RGB", "RGBA", "L", "P", ...).
//   - Image::alpha keeps what Pillow's convert("RGBA") would put in the alpha band, for the files where HF's
//     convert_to_rgb composites (Pillow's image has an "A" band or info["transparency"]); it is empty for
//     every other file (JPEG, PNG without alpha or tRNS). rgb is never changed by it. The values:
//       RGBA 8/16-bit, grey+alpha 8/16-bit -> the alpha sample (its high byte at 16 bits);
//       palette + tRNS -> the entry's tRNS byte, 255 past the tRNS entries (a tRNS of one 0 among 0xff,
//         optionally followed by one 0x0a, is Pillow's single transparent index: only that entry gets 0);
//       grey/RGB + tRNS colour key -> 0 where the converted pixel (the RGB above) equals the key's low
//         bytes (Pillow's rgbT2a masks with 0xff; a 1-bit key is 255 when non-zero), else 255.
//   - composite_on_white() is what HF's convert_to_rgb does next: Pillow's alpha_composite of that RGBA
//     image over an opaque white one (libImaging/AlphaComposite.c's integer arithmetic), then its RGB.
//   - resize_bicubic() is Pillow's Image.resize((w, h), BICUBIC) for an RGB image (src/libImaging/
//     Resample.c): a = -0.5 cubic, support scaled by in/out when shrinking, coefficients normalised and held
//     in 22-bit fixed point, +0.5 rounding and clipping to 0..255, two passes with a uint8 intermediate in
//     Pillow 13's order (vertical first only when the height loses more than twice as many pixels as the
//     width), a pass skipped when its dimension is unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gsurg {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // RGB8, row-major, 3 bytes per pixel
  std::vector<uint8_t> alpha;  // A8, row-major, 1 byte per pixel; empty when the file has no transparency
  std::string mode = "RGB";  // the Pillow mode the file was decoded in, before the conversion to RGB
};

// Reads and decodes a PNG or JPEG file (UTF-8 path) into RGB; throws gsurg::Error naming the path.
Image load_image(const std::string& path);

// The same for a file already in memory; `name` is used in error messages.
Image decode_image(const std::string& bytes, const std::string& name);

// HF's convert_to_rgb: the image composited onto opaque white as Pillow's alpha_composite does (a copy of
// the RGB pixels when alpha is empty); the result has no alpha.
Image composite_on_white(const Image& image);

// Pillow-exact BICUBIC resize of an RGB image to width x height (both >= 1); throws gsurg::Error on bad sizes.
// Only rgb is resized: the result's alpha is empty.
Image resize_bicubic(const Image& src, int width, int height);

}  // namespace gsurg
