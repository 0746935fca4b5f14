// One image as the vision nets take it: a grid of patches, each patch_dim floats, in the order the
// family's preprocessing lays them out (raster order for Penguin-VL). What the image processor, a family's
// preprocess() or a --pixel-values dump gives.
#pragma once

#include <vector>

namespace gsurg {

struct PatchInput {
  int grid_h = 0, grid_w = 0, patch_dim = 0;
  std::vector<float> data;  // [grid_h*grid_w, patch_dim]
};

}  // namespace gsurg
