// PNG decoding with libpng, giving the RGB pixels Pillow gives for Image.open(path).convert("RGB").
//
// Pillow opens a PNG in a mode chosen by (bit depth, colour type) (PngImagePlugin._MODES); the libpng
// transforms here produce that mode's samples, and to_rgb() then applies Pillow's conversion to RGB:
//   grey 1-bit "1": 0/255;  grey 2/4-bit "L": v * 85 / v * 17;  grey 8-bit "L": v   -> (v, v, v)
//   grey 16-bit "I;16": min(v, 255) (Pillow's I16_RGB clips, it does not scale)       -> (v, v, v)
//   RGB 8/16-bit "RGB": 16-bit samples keep their high byte
//   palette 1/2/4/8-bit "P": PLTE lookup; entries past the PLTE are black (Pillow's palette is zeroed)
//   grey+alpha 8-bit "LA", 16-bit "RGBA" (high bytes): (v, v, v), alpha dropped
//   RGBA 8/16-bit "RGBA": alpha dropped, never composited
// A tRNS chunk never changes the pixels (Pillow keeps it in info["transparency"] only); gamma, sBIT and ICC
// chunks are ignored as Pillow ignores them. Interlaced files are de-interlaced by libpng.
//
// libpng reports errors by longjmp: the setjmp frame (read_png) holds no object with a destructor, and
// everything it fills lives in the caller's PngData, so the C++ error is thrown only after libpng is gone.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "decoders.hpp"
#include "pvl/error.hpp"

namespace pvl {
namespace detail {

namespace {

struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

struct PngData {
  char error[256] = {0};
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  size_t rowbytes = 0;
  std::vector<uint8_t> pixels;    // rows after the transforms chosen in read_png
  std::vector<png_bytep> rows;    // pointers into pixels
  uint8_t palette[256 * 3] = {0};  // Pillow's palette: unset entries stay black
};

void on_error(png_structp png, png_const_charp message) {
  auto* out = static_cast<PngData*>(png_get_error_ptr(png));
  std::snprintf(out->error, sizeof out->error, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep dest, png_size_t length) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > src->size - src->pos) png_error(png, "the file is truncated");
  std::memcpy(dest, src->data + src->pos, length);
  src->pos += length;
}

// Decodes into *out; returns false with out->error set when libpng (or a check here) fails.
bool read_png(PngSource* src, PngData* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, out, on_error, on_warning);
  if (png == nullptr) {
    std::snprintf(out->error, sizeof out->error, "libpng could not be initialised");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(out->error, sizeof out->error, "libpng could not be initialised");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, src, on_read);
  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &out->width, &out->height, &out->bit_depth, &out->color_type, &interlace,
               nullptr, nullptr);
  if (static_cast<uint64_t>(out->width) * out->height > kMaxPixels) {
    png_error(png, "the image has too many pixels (over Pillow's decompression-bomb limit)");
  }
  switch (out->color_type) {
    case PNG_COLOR_TYPE_GRAY:
      if (out->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);  // 0..255 as Pillow's "1"/"L;2"/"L;4"
      break;                                                        // 16-bit stays 16-bit (min(v, 255))
    case PNG_COLOR_TYPE_PALETTE: {
      if (out->bit_depth < 8) png_set_packing(png);  // one index per byte
      png_colorp entries = nullptr;
      int count = 0;
      if (png_get_PLTE(png, info, &entries, &count) != 0) {
        for (int i = 0; i < count && i < 256; ++i) {
          out->palette[i * 3 + 0] = entries[i].red;
          out->palette[i * 3 + 1] = entries[i].green;
          out->palette[i * 3 + 2] = entries[i].blue;
        }
      }
      break;
    }
    case PNG_COLOR_TYPE_RGB:
    case PNG_COLOR_TYPE_GRAY_ALPHA:
    case PNG_COLOR_TYPE_RGB_ALPHA:
      if (out->bit_depth == 16) png_set_strip_16(png);  // keeps the high byte, as Pillow's ";16B" unpackers
      break;
    default:
      png_error(png, "unsupported PNG colour type");
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->rowbytes = png_get_rowbytes(png, info);
  out->pixels.resize(out->rowbytes * out->height);
  out->rows.resize(out->height);
  for (png_uint_32 y = 0; y < out->height; ++y) out->rows[y] = out->pixels.data() + y * out->rowbytes;
  png_read_image(png, out->rows.data());
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

// Pillow's convert("RGB") of the mode the file opened in (see the file comment).
Image to_rgb(const PngData& d) {
  Image img;
  img.width = static_cast<int>(d.width);
  img.height = static_cast<int>(d.height);
  img.rgb.resize(static_cast<size_t>(d.width) * d.height * 3);
  uint8_t* o = img.rgb.data();
  const bool grey16 = d.color_type == PNG_COLOR_TYPE_GRAY && d.bit_depth == 16;
  int channels = 1;
  switch (d.color_type) {
    case PNG_COLOR_TYPE_GRAY:
      img.mode = d.bit_depth == 1 ? "1" : grey16 ? "I;16" : "L";
      break;
    case PNG_COLOR_TYPE_PALETTE:
      img.mode = "P";
      break;
    case PNG_COLOR_TYPE_RGB:
      img.mode = "RGB";
      channels = 3;
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      img.mode = d.bit_depth == 16 ? "RGBA" : "LA";
      channels = 2;
      break;
    default:
      img.mode = "RGBA";
      channels = 4;
      break;
  }
  for (png_uint_32 y = 0; y < d.height; ++y) {
    const uint8_t* row = d.rows[y];
    for (png_uint_32 x = 0; x < d.width; ++x, o += 3) {
      if (grey16) {
        unsigned v = (static_cast<unsigned>(row[2 * x]) << 8) | row[2 * x + 1];
        o[0] = o[1] = o[2] = static_cast<uint8_t>(std::min(v, 255u));
      } else if (d.color_type == PNG_COLOR_TYPE_PALETTE) {
        std::memcpy(o, d.palette + 3 * row[x], 3);
      } else if (channels <= 2) {
        o[0] = o[1] = o[2] = row[channels * x];
      } else {
        std::memcpy(o, row + channels * x, 3);
      }
    }
  }
  return img;
}

}  // namespace

Image decode_png(const uint8_t* data, size_t size, const std::string& name) {
  PngSource src{data, size, 0};
  PngData decoded;
  if (!read_png(&src, &decoded)) throw Error(name + ": cannot decode the PNG image: " + decoded.error);
  return to_rgb(decoded);
}

}  // namespace detail
}  // namespace pvl
