// load_image() / decode_image(): read the file, recognise PNG or JPEG by their magic bytes (the extension
// is never consulted: a ".jpg" holding a PNG is decoded as the PNG it is) and hand it to that decoder.
#include <cstring>

#include "decoders.hpp"
#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "gsurg/image.hpp"

namespace gsurg {

namespace {

bool starts_with(const std::string& bytes, const char* magic, size_t n) {
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}

}  // namespace

Image decode_image(const std::string& bytes, const std::string& name) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n", 8)) return detail::decode_png(data, bytes.size(), name);
  if (starts_with(bytes, "\xff\xd8\xff", 3)) return detail::decode_jpeg(data, bytes.size(), name);
  if (bytes.empty()) throw Error(name + ": the file is empty, not an image");
  throw Error(name + ": not a PNG or JPEG file (unrecognised signature; only PNG and JPEG are supported)");
}

Image load_image(const std::string& path) { return decode_image(read_file(path), path); }

}  // namespace gsurg
