// The vision half for one image: pixel patches [N, patch_dim] in raster order (grid_h x grid_w) ->
// vision_embed_patch -> vision_encoder (fed the 2-D RoPE tables computed here for the grid) ->
// vision_projector -> features [N, hidden_size], exactly the net sequence of ncnn_chain.encode_image.
// The encoder's fused RoPE (model.json vision.rope.lowered false: RotaryEmbed 0=0 with full-width tables
// whose halves differ) is right only on ncnn >= 1.0.20261020; an older ncnn is refused at load.
#pragma once

#include <memory>
#include <vector>

#include "pvl/model_config.hpp"
#include "pvl/nets.hpp"

namespace pvl {

struct PatchInput {  // what the image processor (or a --pixel-values dump) gives
  int grid_h = 0, grid_w = 0, patch_dim = 0;
  std::vector<float> data;  // [grid_h*grid_w, patch_dim]
};

class VisionTower {
 public:
  VisionTower(const ModelConfig& cfg, int threads);
  // Features [grid_h*grid_w, hidden_size] row-major.
  std::vector<float> encode(const PatchInput& patches) const;

 private:
  const ModelConfig& cfg_;
  std::unique_ptr<LoadedNet> patch_, encoder_, projector_;
};

}  // namespace pvl
