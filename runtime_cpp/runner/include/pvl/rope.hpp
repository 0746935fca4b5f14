// RoPE inputs the runtime computes between the nets, from model.json's settings alone:
// - inverse frequencies f_i = 1 / theta^(2i/D), i < D/2, in float32 as HF (and the reference) compute them;
// - the vision 2-D tables for a grid: patch p = r*grid_w + c in raster order, row angle r*f_i on the first
//   half of each row and column angle c*f_i on the second (the same D/2 frequencies for both axes), full
//   width [N, D] (penguin-vl.md §3); ncnn >= 1.0.20261020's RotaryEmbed applies the halves independently;
// - the LLM's 1-D tables for absolute positions start..start+T-1, full width (cat(freqs, freqs)) or half;
// - the decoder's additive causal mask [T, start+T]: 0 where key j <= query start+i, else mask_value.
// Angles are float32 products (as HF's float32 tensors); cos/sin are computed in double and rounded once.
#pragma once

#include <vector>

namespace pvl {

std::vector<float> rope_inv_freq(int head_dim, double theta);

struct RopeTables {
  int rows = 0, width = 0;
  std::vector<float> cos, sin;  // rows x width, row-major
};

RopeTables vision_rope_tables(int grid_h, int grid_w, int head_dim, double theta);
RopeTables text_rope_tables(int start, int length, int head_dim, double theta, bool full_width);
std::vector<float> causal_mask(int start, int length, float mask_value);  // length x (start+length)

}  // namespace pvl
