// minicpm_v2_preprocess_dump: gsurg_preprocess and the MiniCPM-V-2 numerics on images and arrays, written as
// .npy files for the parity checker runtime_cpp/tests/check_preprocess_minicpmv2.py. Not part of the runtime.
//
// Image jobs run on the shared driver (runtime_cpp/preprocess/tests/preprocess_dump.hpp, with --jobs); the
// processor's option is --minicpmv2 SETTINGS.json (scale_resolution, max_slice_nums, patch_size):
//   --target-of HxW           prints the plan of an image of that size (no image read);
//   --image PATH              prints the plan, "images N" and "tgt" with each image's patch grid GHxGW;
//                             --out writes every image's float32 [3, H, W] pixels, --resized every uint8
//                             [H, W, 3] image, each concatenated in order (the overview, then the slices
//                             row-major) into one flat .npy;
//   --image PATH --size HxW   --resized writes resize_h_then_v() of the image to H x W (any size).
// A plan is printed as "plan overview WxH grid none" or "plan overview WxH grid CxR refine WxH" (sizes width
// first, the grid columns x rows).
//
// Array jobs: minicpm_v2_preprocess_dump --numerics JOBS.txt, one job per line, its fields separated by tabs:
//   pos TABLE SIDE CHANNELS H W OUT     resample_pos_table() of the float32 table in the raw little-endian
//                                       file TABLE ([SIDE * SIDE, CHANNELS]) to H x W, written [H * W, C];
//   sincos DIM H W OUT                  sincos_2d(DIM, H, W), written [H * W, DIM];
//   trig X OUT                          numpy_sinf and numpy_cosf of the float32 values of the raw file X,
//                                       written [2, n];
//   rows PIXELS H W P OUT               patch_rows() of the float32 [3, H, W] in the raw file PIXELS (patch P),
//                                       written [N, 3 * P * P];
//   fma ABC OUT                         fma_f32(a, b, c) of the float32 triples of the raw file ABC ([n, 3]),
//                                       written [n].
// Each line prints "job N: ok" or "job N: error: MESSAGE"; the exit status is 0 when every job succeeded.
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "gsurg/minicpm_v2_image_processor.hpp"
#include "gsurg/minicpm_v2_positions.hpp"
#include "preprocess_dump.hpp"

namespace {

using namespace gsurg::dump;
namespace mc = gsurg::minicpm_v2;

std::string plan_text(const mc::SlicePlan& plan) {
  std::string text = "plan overview " + std::to_string(plan.overview_width) + "x" +
                     std::to_string(plan.overview_height) + " grid ";
  if (!plan.sliced) return text + "none";
  return text + std::to_string(plan.grid_cols) + "x" + std::to_string(plan.grid_rows) + " refine " +
         std::to_string(plan.refine_width) + "x" + std::to_string(plan.refine_height);
}

std::string run_minicpm_v2(const Options& o) {
  const mc::SliceConfig cfg = mc::SliceConfig::from_json(read_json(o.processor));
  if (!o.target_of.empty()) {
    const gsurg::TargetSize of = parse_size(o.target_of);
    return plan_text(mc::plan_slices(of.width, of.height, cfg));
  }
  if (o.image.empty()) throw gsurg::Error("--image is required");
  const gsurg::Image img = load(o);
  if (!o.size.empty()) {
    const gsurg::TargetSize size = parse_size(o.size);
    if (!o.resized.empty()) write_rgb(o.resized, mc::resize_h_then_v(img, size.width, size.height));
    return "resized " + size_text(size.height, size.width);
  }
  const mc::Processed out = mc::preprocess(img, cfg);
  if (!o.out.empty()) {
    std::vector<float> all;
    for (const mc::Pixels& px : out.pixels) all.insert(all.end(), px.data.begin(), px.data.end());
    write_npy(o.out, "<f4", {all.size()}, all.data(), all.size() * sizeof(float));
  }
  if (!o.resized.empty()) {
    std::vector<uint8_t> all;
    for (const gsurg::Image& rgb : out.resized) all.insert(all.end(), rgb.rgb.begin(), rgb.rgb.end());
    write_npy(o.resized, "|u1", {all.size()}, all.data(), all.size());
  }
  std::string said = plan_text(out.plan) + " images " + std::to_string(out.pixels.size()) + " tgt";
  for (const mc::Pixels& px : out.pixels) said += " " + size_text(px.grid_h(), px.grid_w());
  return said;
}

int to_int(const std::string& text) {
  size_t used = 0;
  const int v = std::stoi(text, &used);
  if (used != text.size()) throw gsurg::Error("not an integer: " + text);
  return v;
}

std::vector<float> read_floats(const std::string& path) {
  const std::string bytes = gsurg::read_file(path);
  if (bytes.size() % sizeof(float) != 0) throw gsurg::Error(path + ": not a whole number of float32 values");
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

void write_floats(const std::string& path, const std::vector<size_t>& shape, const std::vector<float>& v) {
  write_npy(path, "<f4", shape, v.data(), v.size() * sizeof(float));
}

void numerics_job(const std::vector<std::string>& f) {
  const auto need = [&](size_t n) {
    if (f.size() != n) throw gsurg::Error(f[0] + " takes " + std::to_string(n - 1) + " fields");
  };
  if (f[0] == "pos") {
    need(7);
    const int side = to_int(f[2]), channels = to_int(f[3]), h = to_int(f[4]), w = to_int(f[5]);
    const std::vector<float> out = mc::resample_pos_table(read_floats(f[1]), side, channels, h, w);
    write_floats(f[6], {static_cast<size_t>(h) * w, static_cast<size_t>(channels)}, out);
  } else if (f[0] == "sincos") {
    need(5);
    const int dim = to_int(f[1]), h = to_int(f[2]), w = to_int(f[3]);
    write_floats(f[4], {static_cast<size_t>(h) * w, static_cast<size_t>(dim)}, mc::sincos_2d(dim, h, w));
  } else if (f[0] == "trig") {
    need(3);
    const std::vector<float> x = read_floats(f[1]);
    std::vector<float> out(x.size() * 2);
    for (size_t i = 0; i < x.size(); ++i) {
      out[i] = mc::numpy_sinf(x[i]);
      out[x.size() + i] = mc::numpy_cosf(x[i]);
    }
    write_floats(f[2], {2, x.size()}, out);
  } else if (f[0] == "rows") {
    need(6);
    mc::Pixels px;
    px.height = to_int(f[2]);
    px.width = to_int(f[3]);
    px.patch_size = to_int(f[4]);
    px.data = read_floats(f[1]);
    const gsurg::PixelValues rows = mc::patch_rows(px);
    write_floats(f[5], {static_cast<size_t>(rows.grid_h) * rows.grid_w, static_cast<size_t>(rows.patch_dim)},
                 rows.data);
  } else if (f[0] == "fma") {
    need(3);
    const std::vector<float> abc = read_floats(f[1]);
    if (abc.size() % 3 != 0) throw gsurg::Error(f[1] + ": not float32 triples");
    std::vector<float> out(abc.size() / 3);
    for (size_t i = 0; i < out.size(); ++i) out[i] = mc::fma_f32(abc[3 * i], abc[3 * i + 1], abc[3 * i + 2]);
    write_floats(f[2], {out.size()}, out);
  } else {
    throw gsurg::Error("unknown job " + f[0]);
  }
}

int run_numerics(const std::string& jobs_path) {
  std::istringstream lines(gsurg::read_file(jobs_path));
  std::string line;
  int index = 0, failed = 0;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::istringstream parts(line);
    std::string field;
    while (std::getline(parts, field, '\t')) fields.push_back(field);
    try {
      numerics_job(fields);
      std::cout << "job " << index << ": ok\n";
    } catch (const std::exception& e) {
      std::cout << "job " << index << ": error: " << e.what() << "\n";
      ++failed;
    }
    ++index;
  }
  std::cout.flush();
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--numerics") {
    try {
      return run_numerics(argv[2]);
    } catch (const std::exception& e) {
      std::cerr << "minicpm_v2_preprocess_dump: error: " << e.what() << "\n";
      return 2;
    }
  }
  return gsurg::dump::main(argc, argv, "minicpm_v2_preprocess_dump", {"--minicpmv2", &run_minicpm_v2});
}
