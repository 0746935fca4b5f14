// The MiniCPM-V-2 image processor (see gsurg/minicpm_v2_image_processor.hpp): the slice plan of
// graphsurgeon/models/minicpm_v2/slicing.py in IEEE double, the two single-pass BICUBIC resizes of
// processor.resize_h_then_v, the crops, ToTensor + Normalize(0.5, 0.5) in float32, and the patch rows.
// Built with floating-point contraction off (gsurg_fp_contract_off): every double and float operation
// rounds as Python's and numpy's do.
#include "gsurg/minicpm_v2_image_processor.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "gsurg/error.hpp"
#include "gsurg/processor_common.hpp"

namespace gsurg {
namespace minicpm_v2 {

namespace {

using processor::bad;
using processor::find;
using processor::round_half_even;

constexpr int64_t kMaxSide = int64_t{1} << 24;  // resize_bicubic's limit on a side

int get_int(const nlohmann::json& j, const char* key, int maximum) {
  const nlohmann::json* v = find(j, key);
  const std::string what = "an integer from 1 to " + std::to_string(maximum);
  if (v == nullptr || !v->is_number_integer()) bad(key, what, v);
  const bool in_range = v->is_number_unsigned()
                            ? v->get<uint64_t>() >= 1 && v->get<uint64_t>() <= static_cast<uint64_t>(maximum)
                            : v->get<int64_t>() >= 1 && v->get<int64_t>() <= maximum;
  if (!in_range) bad(key, what, v);
  return static_cast<int>(v->get<int64_t>());
}

std::string size_text(int64_t width, int64_t height) {
  return std::to_string(width) + "x" + std::to_string(height);
}

// Python's int(x) for a finite double: truncation toward zero. The plan's values stay far below 2^62.
int64_t trunc_int(double x) { return static_cast<int64_t>(x); }

// slicing.ensure_divide: max(round(length / multiple) * multiple, multiple), round() ties to even. length is
// an integer here (every call site passes int() results or the image's sides), so length / multiple is the
// correctly rounded quotient of two exact doubles, as Python's int / int.
int64_t ensure_divide(int64_t length, int multiple) {
  const double q = static_cast<double>(length) / static_cast<double>(multiple);
  const int64_t rounded = trunc_int(round_half_even(q)) * multiple;
  return rounded > multiple ? rounded : multiple;
}

struct Size {
  int64_t width, height;
};

// slicing.best_resize on the rescaling branch, the only one the plan reaches (allow_upscale, or an area
// above S^2): ratio = w / h, h' = int(S / sqrt(ratio)), w' = int(h' * ratio), each ensure_divide'd.
Size best_resize(double width, double height, int scale_resolution, int patch) {
  const double ratio = width / height;
  const int64_t h = trunc_int(static_cast<double>(scale_resolution) / std::sqrt(ratio));
  const int64_t w = trunc_int(static_cast<double>(h) * ratio);
  return Size{ensure_divide(w, patch), ensure_divide(h, patch)};
}

// slicing.choose_grid for an image whose area needs more than one slice (multiple >= 2): the candidate
// counts multiple-1, multiple, multiple+1 without 1 and above max_slice_nums, grids (m, n / m) for m
// dividing n in ascending order, the first smallest error wins.
void choose_grid(int width, int height, int64_t multiple, const SliceConfig& cfg, int* cols, int* rows) {
  const double log_ratio = std::log(static_cast<double>(width) / static_cast<double>(height));
  double best_error = std::numeric_limits<double>::infinity();
  *cols = 1;
  *rows = 1;
  for (int64_t n = multiple - 1; n <= multiple + 1; ++n) {
    if (n == 1 || n > cfg.max_slice_nums || n < 1) continue;
    for (int64_t m = 1; m <= n; ++m) {
      if (n % m != 0) continue;
      const double error =
          std::fabs(log_ratio - std::log(static_cast<double>(m) / static_cast<double>(n / m)));
      if (error < best_error) {
        best_error = error;
        *cols = static_cast<int>(m);
        *rows = static_cast<int>(n / m);
      }
    }
  }
}

void check_side(const Size& s, const char* what, int width, int height) {
  if (s.width > kMaxSide || s.height > kMaxSide) {
    throw Error("an image of " + size_text(width, height) + " pixels would need a " + what + " of " +
                size_text(s.width, s.height) + " pixels, above the resize limit of 2^24 on a side");
  }
}

// (float32(v) / 255 - 0.5) / 0.5 for the 256 byte values: ToTensor's division, then Normalize's subtraction
// and division, each a float32 operation rounded once.
std::array<float, 256> normalise_table() {
  std::array<float, 256> table{};
  const float mean = 0.5f, std_dev = 0.5f;
  for (int v = 0; v < 256; ++v) {
    const float scaled = static_cast<float>(v) / 255.0f;
    table[static_cast<size_t>(v)] = (scaled - mean) / std_dev;
  }
  return table;
}

// The crop (left, top) + width x height of an RGB image.
Image crop(const Image& src, int left, int top, int width, int height) {
  Image out;
  out.width = width;
  out.height = height;
  out.mode = "RGB";
  out.rgb.resize(static_cast<size_t>(width) * height * 3);
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    const uint8_t* from = &src.rgb[(static_cast<size_t>(top + y) * src.width + left) * 3];
    std::memcpy(&out.rgb[static_cast<size_t>(y) * row_bytes], from, row_bytes);
  }
  return out;
}

Pixels normalise(const Image& rgb, int patch, const std::array<float, 256>& table) {
  Pixels out;
  out.height = rgb.height;
  out.width = rgb.width;
  out.patch_size = patch;
  const size_t plane = static_cast<size_t>(rgb.width) * rgb.height;
  out.data.resize(plane * 3);
  for (size_t i = 0; i < plane; ++i) {
    for (size_t c = 0; c < 3; ++c) out.data[c * plane + i] = table[rgb.rgb[i * 3 + c]];
  }
  return out;
}

}  // namespace

// Two single-pass resizes (the shared resize runs one pass when only one side changes), as
// processor.resize_h_then_v makes Pillow do: the order is Pillow 10.1.0's whatever order the shared resize
// (Pillow 13's choice) would pick for the two sides at once.
Image resize_h_then_v(const Image& src, int width, int height) {
  if (width == src.width) return resize_bicubic(src, width, height);
  const Image wide = resize_bicubic(src, width, src.height);
  return height == src.height ? wide : resize_bicubic(wide, width, height);
}

SliceConfig SliceConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("image_processor: must be a JSON object, not " + j.dump());
  SliceConfig cfg;
  cfg.scale_resolution = get_int(j, "scale_resolution", 4096);
  cfg.max_slice_nums = get_int(j, "max_slice_nums", 64);
  cfg.patch_size = get_int(j, "patch_size", 4096);
  return cfg;
}

std::vector<std::array<int, 4>> SlicePlan::slice_boxes() const {
  std::vector<std::array<int, 4>> boxes;
  if (!sliced) return boxes;
  const int cw = slice_width(), ch = slice_height();
  for (int y = 0; y < refine_height; y += ch) {
    for (int x = 0; x < refine_width; x += cw) boxes.push_back({x, y, x + cw, y + ch});
  }
  return boxes;
}

SlicePlan plan_slices(int width, int height, const SliceConfig& cfg) {
  if (width < 1 || height < 1) {
    throw Error("an image of " + size_text(width, height) + " pixels has nothing to slice");
  }
  const int s = cfg.scale_resolution, p = cfg.patch_size;
  SlicePlan plan;
  plan.width = width;
  plan.height = height;
  // W * H / S^2: both products are exact integers (below 2^53), the quotient one correctly rounded double.
  const double ratio = static_cast<double>(static_cast<int64_t>(width) * height) /
                       static_cast<double>(static_cast<int64_t>(s) * s);
  int64_t multiple = trunc_int(std::ceil(ratio));
  if (multiple > cfg.max_slice_nums) multiple = cfg.max_slice_nums;
  // Both branches rescale: with upscaling allowed when unsliced, and because the area exceeds S^2 when
  // sliced (best_resize's condition holds either way).
  const Size overview = best_resize(width, height, s, p);
  check_side(overview, "overview", width, height);
  plan.overview_width = static_cast<int>(overview.width);
  plan.overview_height = static_cast<int>(overview.height);
  if (multiple <= 1) return plan;
  choose_grid(width, height, multiple, cfg, &plan.grid_cols, &plan.grid_rows);
  plan.sliced = true;
  // slicing.refine_size: each side ensure_divide'd to a multiple of its grid count, the cell (a double)
  // best_resize'd with upscaling, times the grid.
  const double cell_width = static_cast<double>(ensure_divide(width, plan.grid_cols)) / plan.grid_cols;
  const double cell_height = static_cast<double>(ensure_divide(height, plan.grid_rows)) / plan.grid_rows;
  const Size cell = best_resize(cell_width, cell_height, s, p);
  const Size refine{cell.width * plan.grid_cols, cell.height * plan.grid_rows};
  check_side(refine, "refine image", width, height);
  plan.refine_width = static_cast<int>(refine.width);
  plan.refine_height = static_cast<int>(refine.height);
  return plan;
}

Processed preprocess(const Image& image, const SliceConfig& cfg) {
  if (image.width < 1 || image.height < 1 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    throw Error("an image of " + size_text(image.width, image.height) +
                " pixels has no pixels or a pixel buffer of another size");
  }
  Processed out;
  out.plan = plan_slices(image.width, image.height, cfg);
  const SlicePlan& plan = out.plan;
  out.resized.push_back(resize_h_then_v(image, plan.overview_width, plan.overview_height));
  if (plan.sliced) {
    const Image refine = resize_h_then_v(image, plan.refine_width, plan.refine_height);
    for (const std::array<int, 4>& box : plan.slice_boxes()) {
      out.resized.push_back(crop(refine, box[0], box[1], box[2] - box[0], box[3] - box[1]));
    }
  }
  const std::array<float, 256> table = normalise_table();
  for (const Image& rgb : out.resized) out.pixels.push_back(normalise(rgb, cfg.patch_size, table));
  return out;
}

PixelValues patch_rows(const Pixels& pixels) {
  const int p = pixels.patch_size;
  if (p < 1 || pixels.height < p || pixels.width < p || pixels.height % p != 0 || pixels.width % p != 0 ||
      pixels.data.size() != static_cast<size_t>(pixels.height) * pixels.width * 3) {
    throw Error("patch_rows: pixels of " + size_text(pixels.width, pixels.height) + " (" +
                std::to_string(pixels.data.size()) + " values) are not [3, H, W] with H and W multiples of " +
                std::to_string(p));
  }
  PixelValues out;
  out.grid_h = pixels.height / p;
  out.grid_w = pixels.width / p;
  out.patch_dim = 3 * p * p;
  out.data.resize(pixels.data.size());
  const size_t plane = static_cast<size_t>(pixels.height) * pixels.width;
  float* o = out.data.data();
  for (int gy = 0; gy < out.grid_h; ++gy) {
    for (int gx = 0; gx < out.grid_w; ++gx) {
      for (size_t c = 0; c < 3; ++c) {
        for (int ky = 0; ky < p; ++ky) {
          const float* row = &pixels.data[c * plane + (static_cast<size_t>(gy) * p + ky) * pixels.width];
          for (int kx = 0; kx < p; ++kx) *o++ = row[static_cast<size_t>(gx) * p + kx];
        }
      }
    }
  }
  return out;
}

}  // namespace minicpm_v2
}  // namespace gsurg
