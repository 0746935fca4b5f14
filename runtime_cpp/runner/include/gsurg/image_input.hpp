// One image as the vision nets take it: a grid of patches, each patch_dim floats, in the order the
// family's preprocessing lays them out (e.g. raster order). What a family's image processor or a
// --pixel-values dump gives.
//
// A family whose processor cuts one image into several grids (an overview and a grid of slices) gives
// the first grid in the fields above and the others in `parts`, in the processor's order, with how they
// are arranged (`parts_rows` x `parts_cols`), which its prompt spells out. A one-grid image (every other
// family's, every --pixel-values file) leaves parts empty and both counts 0; the core only passes the
// struct on to the family.
#pragma once

#include <vector>

namespace gsurg {

struct PatchInput {
  int grid_h = 0, grid_w = 0, patch_dim = 0;
  std::vector<float> data;  // [grid_h*grid_w, patch_dim]
  std::vector<PatchInput> parts;    // further grids of the same image (each without parts of its own)
  int parts_rows = 0, parts_cols = 0;  // their arrangement; parts.size() == parts_rows * parts_cols
};

}  // namespace gsurg
