// Qwen3-VL's MRoPE position counter over a prompt's images and its interleaved cos/sin tables (see
// family_qwen3_vl.hpp; the Python twin that `gsurg rope` prints is graphsurgeon/verify/mrope.py).
#include <algorithm>
#include <string>

#include "gsurg/error.hpp"
#include "gsurg/family_qwen3_vl.hpp"
#include "gsurg/rope.hpp"

namespace gsurg {

MropePositions::MropePositions(int length, const std::vector<MropeImage>& images, int head_dim, double theta,
                               int sec_t, int sec_h, int sec_w, bool block)
    : inv_(rope_inv_freq(head_dim, theta)), head_dim_(head_dim) {
  if (sec_t < 1 || sec_h < 1 || sec_w < 1 || sec_t + sec_h + sec_w != head_dim / 2)
    throw Error("mrope_section [" + std::to_string(sec_t) + ", " + std::to_string(sec_h) + ", " +
                std::to_string(sec_w) + "] does not sum to head_dim/2 = " + std::to_string(head_dim / 2));
  const int slots = head_dim / 2;
  axis_.assign(static_cast<size_t>(slots), 0);
  for (int i = 0; i < slots; ++i) {
    int& axis = axis_[static_cast<size_t>(i)];
    if (block) axis = i < sec_t ? 0 : (i < sec_t + sec_h ? 1 : 2);
    else if (i % 3 == 1 && i < 3 * sec_h) axis = 1;
    else if (i % 3 == 2 && i < 3 * sec_w) axis = 2;
  }
  t_.reserve(static_cast<size_t>(length));
  int p = 0;
  size_t next_image = 0;
  int k = 0;
  while (k < length) {
    if (next_image < images.size() && images[next_image].first == k) {
      const MropeImage& im = images[next_image++];
      const int count = im.rows * im.cols;
      if (im.rows < 1 || im.cols < 1 || k + count > length)
        throw Error("image " + std::to_string(next_image - 1) + " does not fit the prompt");
      for (int j = 0; j < count; ++j) {
        t_.push_back(p);
        h_.push_back(p + j / im.cols);
        w_.push_back(p + j % im.cols);
      }
      p += std::max(im.rows, im.cols);
      k += count;
      continue;
    }
    t_.push_back(p);
    h_.push_back(p);
    w_.push_back(p);
    ++p;
    ++k;
  }
  if (next_image != images.size()) throw Error("the image runs are not in prompt order");
  next_ = p;
}

RopeTables MropePositions::tables(int start, int rows) const {
  const int half = head_dim_ / 2;
  RopeTables out = empty_tables(rows, head_dim_);
  const int length = static_cast<int>(t_.size());
  for (int r = 0; r < rows; ++r) {
    const int k = start + r;
    int pos[3];
    if (k < length) {
      pos[0] = t_[static_cast<size_t>(k)];
      pos[1] = h_[static_cast<size_t>(k)];
      pos[2] = w_[static_cast<size_t>(k)];
    } else {  // generated tokens continue as text after the prompt's last position
      pos[0] = pos[1] = pos[2] = next_ + (k - length);
    }
    for (int i = 0; i < half; ++i) {
      const size_t slot = static_cast<size_t>(i);
      const float angle = static_cast<float>(pos[axis_[slot]]) * inv_[slot];
      put_angle(out, r, i, angle);
      put_angle(out, r, half + i, angle);
    }
  }
  return out;
}

}  // namespace gsurg
