// qwen3_vl_preprocess_dump: gsurg_preprocess and the Qwen3-VL image processor on images, written as .npy files
// for the parity checker check_preprocess_qwen3vl.py (which compares them with HF transformers'
// Qwen2VLImageProcessorPil). The driver and its options: runtime_cpp/preprocess/tests/preprocess_dump.hpp;
// the processor's option is --qwen3vl IMAGE_PROCESSOR.json (model.json's "image_processor" object).
// --target-of prints qwen3vl_smart_resize()'s "target HxW"; an image job prints "target HxW" (the resize
// target, or --size) and with --out " grid GHxGW" (in patches), and --out writes pixel_values as float32
// [grid_h * grid_w, patch_dim] in HF's merge-block patch order. Not part of the runtime.
#include <string>

#include "gsurg/error.hpp"
#include "gsurg/qwen3_vl_image_processor.hpp"
#include "preprocess_dump.hpp"

namespace {

using namespace gsurg::dump;

std::string run_qwen3_vl(const Options& o) {
  const gsurg::Qwen3VlImageConfig cfg = gsurg::Qwen3VlImageConfig::from_json(read_json(o.processor));
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

}  // namespace

int main(int argc, char** argv) {
  return gsurg::dump::main(argc, argv, "qwen3_vl_preprocess_dump", {"--qwen3vl", &run_qwen3_vl});
}
