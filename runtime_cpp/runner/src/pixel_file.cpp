// Reads a --pixel-values dump (see pixel_file.hpp).
#include "gsurg/pixel_file.hpp"

#include <cstdint>
#include <cstring>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"

namespace gsurg {

PatchInput read_pixel_file(const std::string& path) {
  const std::string bytes = read_file(path);
  const size_t header = 8 + 3 * 4;
  if (bytes.size() < header || bytes.compare(0, 8, "PVLPIX01") != 0)
    throw Error(path + ": not a pixel-values dump (no PVLPIX01 header)");
  int32_t dims[3];
  std::memcpy(dims, bytes.data() + 8, sizeof dims);
  PatchInput in;
  in.grid_h = dims[0];
  in.grid_w = dims[1];
  in.patch_dim = dims[2];
  if (in.grid_h < 1 || in.grid_w < 1 || in.patch_dim < 1 || in.grid_h > 65536 || in.grid_w > 65536)
    throw Error(path + ": bad grid " + std::to_string(in.grid_h) + "x" + std::to_string(in.grid_w) +
                " or patch size " + std::to_string(in.patch_dim));
  const uint64_t count = static_cast<uint64_t>(in.grid_h) * in.grid_w * in.patch_dim;
  if (bytes.size() - header != count * 4)
    throw Error(path + ": " + std::to_string(bytes.size() - header) + " data bytes, expected " +
                std::to_string(count * 4));
  in.data.resize(static_cast<size_t>(count));
  std::memcpy(in.data.data(), bytes.data() + header, bytes.size() - header);
  return in;
}

}  // namespace gsurg
