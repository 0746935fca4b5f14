// One image as the vision nets take it: a grid of patches, each patch_dim floats, in the order the
// family's preprocessing lays them out (e.g. raster order). What a family's image processor or a
// --pixel-values dump gives.
#pragma once

#include <vector>

namespace gsurg {

struct PatchInput {
  int grid_h = 0, grid_w = 0, patch_dim = 0;
  std::vector<float> data;  // [grid_h*grid_w, patch_dim]
};

}  // namespace gsurg
