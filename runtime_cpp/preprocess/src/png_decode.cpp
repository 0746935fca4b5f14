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
// Image::alpha is Pillow's convert("RGBA") alpha, filled when HF's convert_to_rgb would composite:
//   RGBA and grey+alpha: the alpha sample (high byte at 16 bits, as the ";16B" unpackers);
//   palette + tRNS: putpalettealphas() of the tRNS bytes (entries past them opaque), or putpalettealpha(i, 0)
//     when PngImagePlugin's _simple_palette regex b"^\xff*\x00\xff*$" matches (its $ also matches before a
//     final b"\n", so a trailing 0x0a alpha is then ignored);
//   grey/RGB + tRNS: Pillow's convert_transparent, rgbT2a: alpha 0 where the converted pixel equals the key
//     masked with 0xff (the key is the raw tRNS sample, not scaled to the 2/4-bit expansion; "1" takes 255
//     for any non-zero key), 255 elsewhere.
// The tRNS values are read before libpng's transforms run (png_read_update_info drops them on expansion).
//
// libpng reports errors by longjmp: the setjmp frame (read_png) holds no object with a destructor, and
// everything it fills lives in the caller's PngData, so the C++ error is thrown only after libpng is gone.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "decoders.hpp"
#include "gsurg/error.hpp"

namespace gsurg {
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
  bool has_trns = false;           // a tRNS chunk libpng accepted
  std::vector<uint8_t> trns_alpha;  // palette: one alpha per leading entry
  png_color_16 trns_key{};          // grey / RGB: the transparent colour, raw samples
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
  png_bytep trans_alpha = nullptr;
  int num_trans = 0;
  png_color_16p trans_color = nullptr;
  if (png_get_tRNS(png, info, &trans_alpha, &num_trans, &trans_color) != 0) {
    out->has_trns = true;
    if (out->color_type == PNG_COLOR_TYPE_PALETTE && trans_alpha != nullptr) {
      out->trns_alpha.assign(trans_alpha, trans_alpha + num_trans);
    } else if (trans_color != nullptr) {
      out->trns_key = *trans_color;
    }
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

// Whether PngImagePlugin's _simple_palette, b"^\xff*\x00\xff*$", matches a palette tRNS: one 0, every other
// byte 0xff, except that re's $ also matches before a final b"\n".
bool simple_palette(const std::vector<uint8_t>& t) {
  const auto strict = [&t](size_t n) {
    size_t zeros = 0;
    for (size_t i = 0; i < n; ++i) {
      if (t[i] == 0) ++zeros;
      else if (t[i] != 0xff) return false;
    }
    return zeros == 1;
  };
  return strict(t.size()) || (!t.empty() && t.back() == 0x0a && strict(t.size() - 1));
}

// The alpha of each palette entry after Pillow's convert("RGBA") of a "P" image with a tRNS chunk.
void palette_alphas(const PngData& d, uint8_t alphas[256]) {
  std::fill(alphas, alphas + 256, uint8_t{255});
  const std::vector<uint8_t>& t = d.trns_alpha;
  if (simple_palette(t)) {
    alphas[std::find(t.begin(), t.end(), uint8_t{0}) - t.begin()] = 0;  // info["transparency"] = index
  } else {
    std::copy(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(t.size(), 256)), alphas);
  }
}

// Pillow's convert("RGBA") alpha (see the file comment), for an image whose rgb is already filled.
void fill_alpha(const PngData& d, Image* img) {
  const size_t count = static_cast<size_t>(d.width) * d.height;
  const int channels = d.color_type == PNG_COLOR_TYPE_GRAY_ALPHA  ? 2
                       : d.color_type == PNG_COLOR_TYPE_RGB_ALPHA ? 4
                                                                  : 0;  // the alpha sample is the last
  if (channels == 0 && !d.has_trns) return;  // no "A" band, no info["transparency"]: HF does not composite
  img->alpha.assign(count, 255);
  uint8_t* a = img->alpha.data();
  if (channels != 0) {
    for (png_uint_32 y = 0; y < d.height; ++y) {
      const uint8_t* row = d.rows[y];
      for (png_uint_32 x = 0; x < d.width; ++x) *a++ = row[channels * x + channels - 1];
    }
  } else if (d.color_type == PNG_COLOR_TYPE_PALETTE) {
    uint8_t alphas[256];
    palette_alphas(d, alphas);
    for (png_uint_32 y = 0; y < d.height; ++y) {
      const uint8_t* row = d.rows[y];
      for (png_uint_32 x = 0; x < d.width; ++x) *a++ = alphas[row[x]];
    }
  } else {
    uint8_t key[3];
    if (d.color_type == PNG_COLOR_TYPE_RGB) {
      key[0] = static_cast<uint8_t>(d.trns_key.red & 0xff);
      key[1] = static_cast<uint8_t>(d.trns_key.green & 0xff);
      key[2] = static_cast<uint8_t>(d.trns_key.blue & 0xff);
    } else {
      const unsigned grey = d.bit_depth == 1 ? (d.trns_key.gray != 0 ? 255u : 0u) : d.trns_key.gray;
      key[0] = key[1] = key[2] = static_cast<uint8_t>(grey & 0xff);
    }
    const uint8_t* px = img->rgb.data();
    for (size_t i = 0; i < count; ++i, px += 3) {
      if (px[0] == key[0] && px[1] == key[1] && px[2] == key[2]) a[i] = 0;
    }
  }
}

// Pillow's convert("RGB") of the mode the file opened in (see the file comment), and the alpha HF uses.
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
  fill_alpha(d, &img);
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
}  // namespace gsurg
