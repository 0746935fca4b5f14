// LLM 1-D RoPE tables and the causal mask (see rope.hpp).
#include "gsurg/rope.hpp"

#include <cmath>

namespace gsurg {

std::vector<float> rope_inv_freq(int head_dim, double theta) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  const float base = static_cast<float>(theta);
  for (int i = 0; i < head_dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float denom = std::pow(base, exponent);  // float pow, as torch's float32 theta ** exponents
    inv[static_cast<size_t>(i)] = 1.0f / denom;
  }
  return inv;
}

void put_angle(RopeTables& t, int row, int col, float angle) {
  size_t at = static_cast<size_t>(row) * t.width + col;
  t.cos[at] = static_cast<float>(std::cos(static_cast<double>(angle)));
  t.sin[at] = static_cast<float>(std::sin(static_cast<double>(angle)));
}

RopeTables empty_tables(int rows, int width) {
  RopeTables t;
  t.rows = rows;
  t.width = width;
  t.cos.assign(static_cast<size_t>(rows) * width, 0.0f);
  t.sin.assign(static_cast<size_t>(rows) * width, 0.0f);
  return t;
}

RopeTables text_rope_tables(int start, int length, int head_dim, double theta, bool full_width) {
  const std::vector<float> inv = rope_inv_freq(head_dim, theta);
  const int half = head_dim / 2;
  RopeTables t = empty_tables(length, full_width ? head_dim : half);
  for (int k = 0; k < length; ++k) {
    const float pos = static_cast<float>(start + k);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv[static_cast<size_t>(i)];
      put_angle(t, k, i, angle);
      if (full_width) put_angle(t, k, half + i, angle);
    }
  }
  return t;
}

std::vector<float> causal_mask(int start, int length, float mask_value) {
  const int keys = start + length;
  std::vector<float> mask(static_cast<size_t>(length) * keys, 0.0f);
  for (int i = 0; i < length; ++i) {
    for (int j = start + i + 1; j < keys; ++j) mask[static_cast<size_t>(i) * keys + j] = mask_value;
  }
  return mask;
}

}  // namespace gsurg
