// RoPE inputs the runtime computes between the nets, from model.json's settings alone (the core's part;
// a family's own tables, e.g. 2-D vision tables, live with the family and use put_angle):
// - inverse frequencies f_i = 1 / theta^(2i/D), i < D/2, in float32 as HF (and the reference) compute them;
// - the LLM's 1-D tables for absolute positions start..start+T-1, full width (cat(freqs, freqs)) or half;
// - the decoder's additive causal mask [T, start+T]: 0 where key j <= query start+i, else mask_value.
// Angles are float32 products (as HF's float32 tensors); cos/sin are computed in double and rounded once.
#pragma once

#include <vector>

namespace gsurg {

std::vector<float> rope_inv_freq(int head_dim, double theta);

struct RopeTables {
  int rows = 0, width = 0;
  std::vector<float> cos, sin;  // rows x width, row-major
};

RopeTables empty_tables(int rows, int width);                    // zeros, rows x width
void put_angle(RopeTables& t, int row, int col, float angle);    // cos / sin of one slot
RopeTables text_rope_tables(int start, int length, int head_dim, double theta, bool full_width);
std::vector<float> causal_mask(int start, int length, float mask_value);  // length x (start+length)

}  // namespace gsurg
