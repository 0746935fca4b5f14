// What a family's image processor gives (its own header, in runtime_cpp/families/<name>/, says how): the
// resize target it chose and the vision tower's pixel_values as a grid of patches.
#pragma once

#include <vector>

namespace gsurg {

struct TargetSize {
  int height, width;
};

struct PixelValues {
  int grid_h = 0, grid_w = 0, patch_dim = 0;
  std::vector<float> data;  // [grid_h * grid_w, patch_dim], row-major
};

}  // namespace gsurg
