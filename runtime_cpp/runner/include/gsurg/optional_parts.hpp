// What the core and the families share about the build's optional parts (runtime_cpp/tokenizer,
// runtime_cpp/preprocess; GSURG_HAVE_TOKENIZER / GSURG_HAVE_PREPROCESS):
// - part_missing: the one error a flag gets when the part it needs was not built, naming the debug input
//   that replaces it;
// - patch_preprocessor: a family's image processor (image -> gsurg_preprocess's PixelValues) as the
//   ImagePreprocessor the core calls (the same grid, patch width and values as a PatchInput).
#pragma once

#include <functional>
#include <utility>

#include "gsurg/family.hpp"

#if GSURG_HAVE_PREPROCESS
#include "gsurg/image.hpp"
#include "gsurg/pixel_values.hpp"
#endif

namespace gsurg {

// "this NAME was built without runtime_cpp/PART: FLAG is unavailable (use INSTEAD)"
[[noreturn]] void part_missing(const char* part, const char* flag, const char* instead);

#if GSURG_HAVE_PREPROCESS
inline ImagePreprocessor patch_preprocessor(std::function<PixelValues(const Image&)> process) {
  return [process = std::move(process)](const Image& image) {
    PixelValues pv = process(image);
    PatchInput in;
    in.grid_h = pv.grid_h;
    in.grid_w = pv.grid_w;
    in.patch_dim = pv.patch_dim;
    in.data = std::move(pv.data);
    return in;
  };
}
#endif

}  // namespace gsurg
