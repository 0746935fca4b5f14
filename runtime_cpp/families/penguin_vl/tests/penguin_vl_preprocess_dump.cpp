// penguin_vl_preprocess_dump: gsurg_preprocess and the Penguin-VL image processor on images, written as .npy
// files for the parity checker runtime_cpp/tests/check_preprocess.py (which compares them with Pillow and
// the Python processor). The driver and its options: runtime_cpp/preprocess/tests/preprocess_dump.hpp; the
// processor's option is --config preprocessor_config.json. --target-of prints "target HxW" (the resize
// target of penguin_vl_target_size()); an image job prints nothing more, and --out writes pixel_values as
// float32 [grid_h, grid_w, patch_dim] (so the grid is the shape). Not part of the runtime.
#include <string>

#include "gsurg/error.hpp"
#include "gsurg/penguin_vl_image_processor.hpp"
#include "preprocess_dump.hpp"

namespace {

using namespace gsurg::dump;

std::string run_penguin_vl(const Options& o) {
  const gsurg::PenguinVlImageConfig cfg = gsurg::PenguinVlImageConfig::from_json(read_json(o.processor));
  if (!o.target_of.empty()) {
    const gsurg::TargetSize of = parse_size(o.target_of);
    const gsurg::TargetSize t = gsurg::penguin_vl_target_size(of.height, of.width, cfg);
    return "target " + size_text(t.height, t.width);
  }
  if (o.image.empty()) throw gsurg::Error("--image is required");
  const gsurg::Image img = load(o);
  const gsurg::TargetSize size =
      o.size.empty() ? gsurg::penguin_vl_target_size(img.height, img.width, cfg) : parse_size(o.size);
  if (!o.resized.empty()) write_rgb(o.resized, gsurg::resize_bicubic(img, size.width, size.height));
  if (!o.out.empty()) {
    const gsurg::PixelValues pv = gsurg::penguin_vl_preprocess_at(img, cfg, size);
    write_npy(o.out, "<f4",
              {static_cast<size_t>(pv.grid_h), static_cast<size_t>(pv.grid_w), static_cast<size_t>(pv.patch_dim)},
              pv.data.data(), pv.data.size() * sizeof(float));
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  return gsurg::dump::main(argc, argv, "penguin_vl_preprocess_dump", {"--config", &run_penguin_vl});
}
