// JPEG decoding with libjpeg(-turbo), giving the RGB pixels Pillow gives for Image.open(path).convert("RGB").
//
// Pillow decodes JPEG with libjpeg-turbo at the library defaults (JDCT_ISLOW, fancy upsampling; only its
// draft mode changes them), lets libjpeg guess the colour space from the JFIF/Adobe markers, and picks the
// mode from the component count (JpegImagePlugin.SOF): 1 -> "L" (JCS_GRAYSCALE), 3 -> "RGB" (JCS_RGB),
// 4 -> "CMYK" read as "CMYK;I" (Adobe's inverted CMYK, JCS_CMYK, YCCK converted by libjpeg); other counts
// and non-8-bit precision are refused. convert("RGB") then gives (v, v, v) for "L" and, for "CMYK", with the
// inverted samples c, m, y, k: nk = 255 - k, r = clip8(nk - muldiv255(c, nk)) (Pillow's cmyk2rgb).
// A file that ends before the image does is an error, as in Pillow (ImageFile.LOAD_TRUNCATED_IMAGES off);
// libjpeg's other warnings (corrupt data it recovers from) are ignored, as Pillow ignores them.
//
// libjpeg reports errors by longjmp: the setjmp frame (read_jpeg) holds no object with a destructor, and the
// C++ error is thrown only after the decompressor is destroyed.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "decoders.hpp"
#include "gsurg/error.hpp"

namespace gsurg {
namespace detail {

namespace {

struct JpegData {
  jpeg_error_mgr err;  // first member: libjpeg hands back a jpeg_error_mgr*
  std::jmp_buf jump;
  jpeg_decompress_struct cinfo;  // here, not in read_jpeg's frame, so longjmp leaves it well defined
  char error[JMSG_LENGTH_MAX + 64] = {0};
  bool truncated = false;
  int width = 0, height = 0, components = 0;
  std::vector<uint8_t> pixels;  // libjpeg's output samples, `components` bytes per pixel
};

void on_error_exit(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<JpegData*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, d->error);
  std::longjmp(d->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  auto* d = reinterpret_cast<JpegData*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) d->truncated = true;
}

bool read_jpeg(const uint8_t* data, size_t size, JpegData* out) {
  jpeg_decompress_struct& cinfo = out->cinfo;
  std::memset(&cinfo, 0, sizeof cinfo);  // jpeg_destroy_decompress is a no-op until it is created
  cinfo.err = jpeg_std_error(&out->err);
  out->err.error_exit = on_error_exit;
  out->err.emit_message = on_message;
  if (setjmp(out->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, const_cast<unsigned char*>(data), static_cast<unsigned long>(size));
  if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK || out->truncated) {
    std::snprintf(out->error, sizeof out->error, "the file is truncated (no complete JPEG header)");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (static_cast<uint64_t>(cinfo.image_width) * cinfo.image_height > kMaxPixels) {
    std::snprintf(out->error, sizeof out->error,
                  "the image has too many pixels (over Pillow's decompression-bomb limit)");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  switch (cinfo.num_components) {
    case 1:
      cinfo.out_color_space = JCS_GRAYSCALE;
      break;
    case 3:
      cinfo.out_color_space = JCS_RGB;
      break;
    case 4:
      cinfo.out_color_space = JCS_CMYK;
      break;
    default:
      std::snprintf(out->error, sizeof out->error, "cannot handle %d-component JPEG images",
                    cinfo.num_components);
      jpeg_destroy_decompress(&cinfo);
      return false;
  }
  jpeg_start_decompress(&cinfo);
  out->width = static_cast<int>(cinfo.output_width);
  out->height = static_cast<int>(cinfo.output_height);
  out->components = cinfo.output_components;
  const size_t stride = static_cast<size_t>(out->width) * out->components;
  out->pixels.resize(stride * out->height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->pixels.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (out->truncated) {
    std::snprintf(out->error, sizeof out->error, "the file is truncated");
    return false;
  }
  return true;
}

uint8_t muldiv255(int a, int b) {
  int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

}  // namespace

Image decode_jpeg(const uint8_t* data, size_t size, const std::string& name) {
  JpegData d;
  if (!read_jpeg(data, size, &d)) throw Error(name + ": cannot decode the JPEG image: " + d.error);
  Image img;
  img.width = d.width;
  img.height = d.height;
  const size_t n = static_cast<size_t>(d.width) * d.height;
  if (d.components == 3) {
    img.mode = "RGB";
    img.rgb = std::move(d.pixels);
    return img;
  }
  img.rgb.resize(n * 3);
  uint8_t* o = img.rgb.data();
  const uint8_t* in = d.pixels.data();
  if (d.components == 1) {
    img.mode = "L";
    for (size_t i = 0; i < n; ++i, o += 3) o[0] = o[1] = o[2] = in[i];
  } else {
    img.mode = "CMYK";
    for (size_t i = 0; i < n; ++i, o += 3, in += 4) {
      // Pillow's "CMYK;I" inverts every sample (c' = 255 - c), so its nk = 255 - k' is the raw k.
      const int nk = in[3];
      for (int c = 0; c < 3; ++c) {
        const int v = nk - muldiv255(255 - in[c], nk);
        o[c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return img;
}

}  // namespace detail
}  // namespace gsurg
