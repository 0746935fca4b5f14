// The --pixel-values debug input: an image already preprocessed by a family's Python processor, written by
// its checker (runtime_cpp/families/<name>/tests/, e.g. check_generate.py dump-pixels).
// Layout, little-endian: 8 bytes "PVLPIX01", int32 grid_h, int32 grid_w, int32 patch_dim, then
// grid_h*grid_w*patch_dim float32 values (patches in raster order). Anything else is a gsurg::Error.
#pragma once

#include <string>

#include "gsurg/image_input.hpp"

namespace gsurg {

PatchInput read_pixel_file(const std::string& path);

}  // namespace gsurg
