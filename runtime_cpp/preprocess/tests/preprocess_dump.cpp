// gsurg_preprocess_dump: runs gsurg_preprocess on images and writes what it computed as .npy files, for the
// parity checker runtime_cpp/tests/check_preprocess.py (which compares them with Pillow and the Python
// processor), and for check_preprocess_qwen3vl.py (which compares the Qwen3-VL processor with HF's). Not
// part of the runtime.
//
//   gsurg_preprocess_dump --image PATH --config preprocessor_config.json [--size HxW]
//                       [--out PV.npy] [--resized RGB.npy] [--decoded RGB.npy]
//   gsurg_preprocess_dump --config CFG --target-of HxW
//   gsurg_preprocess_dump --config CFG --jobs JOBS.txt
//   gsurg_preprocess_dump --qwen3vl IMAGE_PROCESSOR.json (--target-of HxW | --image PATH [--size HxW]
//                       [--out PV.npy] [--resized RGB.npy] [--decoded RGB.npy])
//   gsurg_preprocess_dump --image PATH [--decoded RGB.npy] [--alpha A.npy] [--composited RGB.npy]
//
// --out writes pixel_values as float32 [grid_h, grid_w, patch_dim] (so the grid is the shape); --size forces
// the resize target (H x W) instead of target_size(); --resized writes the resized RGB image and --decoded
// the decoded one, as uint8 [H, W, 3] (with --resized any --size is allowed, not only multiples of the
// patch). --target-of prints "target HxW", the resize target of an image of that size, with no image read.
// --jobs runs one job per line of JOBS.txt, each line the options above separated by tabs (on top of
// the options given on the command line), and prints "job N: ok[ target HxW]" or "job N: error: MESSAGE" per line, so one
// process serves a whole test (one wine start for the Windows build). Exit 0 when every job succeeded.
// --qwen3vl takes the Qwen3-VL processor instead of Penguin-VL's (no --config): the file is model.json's
// "image_processor" object; --target-of prints qwen3vl_smart_resize()'s "target HxW"; an image job prints
// "target HxW" (the resize target, or --size) and with --out " grid GHxGW" (in patches), and --out writes
// pixel_values as float32 [grid_h * grid_w, patch_dim] in HF's merge-block patch order.
// With neither --config nor --qwen3vl an image is only decoded: --alpha writes Image::alpha as uint8 [H, W]
// (shape [0] when the image has none), --composited composite_on_white() as uint8 [H, W, 3] (both are
// accepted in the other image jobs too).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "gsurg/image.hpp"
#include "gsurg/image_processor.hpp"
#include "gsurg/qwen3vl_image_processor.hpp"
#include "gsurg/sanitizer_defaults.hpp"

namespace {

struct Options {
  std::string image, config, size, out, resized, decoded, alpha, composited, jobs, target_of, qwen3vl;
};

void parse(const std::vector<std::string>& args, Options* o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i + 1 >= args.size()) throw gsurg::Error("option " + a + " needs a value");
    const std::string& v = args[++i];
    if (a == "--image") o->image = v;
    else if (a == "--config") o->config = v;
    else if (a == "--size") o->size = v;
    else if (a == "--out") o->out = v;
    else if (a == "--resized") o->resized = v;
    else if (a == "--decoded") o->decoded = v;
    else if (a == "--alpha") o->alpha = v;
    else if (a == "--composited") o->composited = v;
    else if (a == "--jobs") o->jobs = v;
    else if (a == "--target-of") o->target_of = v;
    else if (a == "--qwen3vl") o->qwen3vl = v;
    else throw gsurg::Error("unknown option " + a);
  }
}

void write_npy(const std::string& path, const char* descr, const std::vector<size_t>& shape,
               const void* data, size_t bytes) {
  std::string shape_text = "(";
  for (size_t d : shape) shape_text += std::to_string(d) + ", ";
  shape_text += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_text + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(gsurg::fopen_utf8(path, "wb"), &std::fclose);
  if (!f) throw gsurg::Error(path + ": cannot create the file");
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                static_cast<unsigned char>(header.size() >> 8)};
  bool ok = std::fwrite(magic, 1, 8, f.get()) == 8 && std::fwrite(len, 1, 2, f.get()) == 2 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f.get()) == bytes);  // no data: never fwrite(nullptr)
  if (!ok || std::fflush(f.get()) != 0) throw gsurg::Error(path + ": write failed");
}

void write_rgb(const std::string& path, const gsurg::Image& img) {
  write_npy(path, "|u1", {static_cast<size_t>(img.height), static_cast<size_t>(img.width), 3},
            img.rgb.data(), img.rgb.size());
}

// The decoded image and, when asked, its --decoded, --alpha and --composited dumps.
gsurg::Image load(const Options& o) {
  gsurg::Image img = gsurg::load_image(o.image);
  if (!o.decoded.empty()) write_rgb(o.decoded, img);
  if (!o.alpha.empty()) {
    std::vector<size_t> shape{static_cast<size_t>(img.height), static_cast<size_t>(img.width)};
    if (img.alpha.empty()) shape = {0};
    write_npy(o.alpha, "|u1", shape, img.alpha.data(), img.alpha.size());
  }
  if (!o.composited.empty()) write_rgb(o.composited, gsurg::composite_on_white(img));
  return img;
}

gsurg::TargetSize parse_size(const std::string& text) {
  int h = 0, w = 0;
  char x = 0, extra = 0;
  std::istringstream in(text);
  if (!(in >> h >> x >> w) || x != 'x' || (in >> extra) || h < 1 || w < 1) {
    throw gsurg::Error("--size must be HxW with positive integers, not " + text);
  }
  return gsurg::TargetSize{h, w};
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(gsurg::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw gsurg::Error(path + ": not valid JSON: " + e.what());
  }
}

std::string size_text(int height, int width) { return std::to_string(height) + "x" + std::to_string(width); }

// A --qwen3vl job: the Qwen3-VL processor's target size, or an image's resize and pixel_values.
std::string run_qwen3vl(const Options& o) {
  if (!o.config.empty()) throw gsurg::Error("--config and --qwen3vl exclude each other");
  const gsurg::Qwen3VlImageConfig cfg = gsurg::Qwen3VlImageConfig::from_json(read_json(o.qwen3vl));
  if (!o.target_of.empty()) {
    const gsurg::TargetSize of = parse_size(o.target_of);
    const gsurg::TargetSize t = gsurg::qwen3vl_smart_resize(of.height, of.width, cfg);
    return "target " + size_text(t.height, t.width);
  }
  if (o.image.empty()) throw gsurg::Error("--image is required");
  const gsurg::Image img = load(o);
  const gsurg::TargetSize size =
      o.size.empty() ? gsurg::qwen3vl_smart_resize(img.height, img.width, cfg) : parse_size(o.size);
  if (!o.resized.empty()) write_rgb(o.resized, gsurg::resize_bicubic(img, size.width, size.height));
  std::string said = "target " + size_text(size.height, size.width);
  if (!o.out.empty()) {
    const gsurg::PixelValues pv = gsurg::qwen3vl_preprocess_at(img, cfg, size);
    write_npy(o.out, "<f4",
              {static_cast<size_t>(pv.grid_h) * static_cast<size_t>(pv.grid_w), static_cast<size_t>(pv.patch_dim)},
              pv.data.data(), pv.data.size() * sizeof(float));
    said += " grid " + size_text(pv.grid_h, pv.grid_w);
  }
  return said;
}

// Runs one job; returns what to print after "ok" (the target size for --target-of, else "").
std::string run(const Options& o) {
  if (!o.qwen3vl.empty()) return run_qwen3vl(o);
  if (o.config.empty() && !o.image.empty() && o.target_of.empty() && o.size.empty() && o.out.empty() &&
      o.resized.empty()) {
    load(o);  // decode only
    return "";
  }
  if (o.config.empty()) throw gsurg::Error("--config is required");
  const gsurg::ImageProcessorConfig cfg = gsurg::ImageProcessorConfig::from_json(read_json(o.config));
  if (!o.target_of.empty()) {
    const gsurg::TargetSize of = parse_size(o.target_of);
    const gsurg::TargetSize t = gsurg::target_size(of.height, of.width, cfg);
    return "target " + std::to_string(t.height) + "x" + std::to_string(t.width);
  }
  if (o.image.empty()) throw gsurg::Error("--image is required");
  const gsurg::Image img = load(o);
  const gsurg::TargetSize size = o.size.empty() ? gsurg::target_size(img.height, img.width, cfg) : parse_size(o.size);
  if (!o.resized.empty()) write_rgb(o.resized, gsurg::resize_bicubic(img, size.width, size.height));
  if (!o.out.empty()) {
    const gsurg::PixelValues pv = gsurg::preprocess_at(img, cfg, size);
    write_npy(o.out, "<f4",
              {static_cast<size_t>(pv.grid_h), static_cast<size_t>(pv.grid_w), static_cast<size_t>(pv.patch_dim)},
              pv.data.data(), pv.data.size() * sizeof(float));
  }
  return "";
}

int run_jobs(const Options& base) {
  const std::string text = gsurg::read_file(base.jobs);
  std::istringstream lines(text);
  std::string line;
  int index = 0, failed = 0;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> args;
    std::istringstream fields(line);
    std::string field;
    while (std::getline(fields, field, '\t')) args.push_back(field);
    Options o = base;
    o.jobs.clear();
    try {
      parse(args, &o);
      const std::string extra = run(o);
      std::cout << "job " << index << ": ok" << (extra.empty() ? "" : " ") << extra << "\n";
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
  try {
    Options o;
    parse(std::vector<std::string>(argv + 1, argv + argc), &o);
    if (!o.jobs.empty()) return run_jobs(o);
    const std::string extra = run(o);
    if (!extra.empty()) std::cout << extra << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gsurg_preprocess_dump: error: " << e.what() << "\n";
    return 2;
  }
}
