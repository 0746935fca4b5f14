// The MiniCPM-V-2 family's run: vision nets on first use, the image processor (an overview and its slices
// per image), the grids in prompt order, the resampler rows over the image spans, 1-D RoPE positions (see
// family_minicpm_v2.hpp).
#include "gsurg/family_minicpm_v2.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "gsurg/error.hpp"
#include "gsurg/optional_parts.hpp"

#if GSURG_HAVE_PREPROCESS
#include "gsurg/image.hpp"
#include "gsurg/minicpm_v2_image_processor.hpp"
#endif

namespace gsurg {

namespace {

#if GSURG_HAVE_PREPROCESS
PatchInput as_patch_input(PixelValues pv) {
  PatchInput in;
  in.grid_h = pv.grid_h;
  in.grid_w = pv.grid_w;
  in.patch_dim = pv.patch_dim;
  in.data = std::move(pv.data);
  return in;
}

// One image -> the overview's patch rows, the slices' as its parts (row-major, as the processor gives
// them), the slice grid as parts_rows x parts_cols.
PatchInput minicpm_v2_patches(const Image& image, const minicpm_v2::SliceConfig& cfg) {
  minicpm_v2::Processed processed = minicpm_v2::preprocess(image, cfg);
  processed.resized.clear();  // the uint8 images are not needed past normalisation
  PatchInput out = as_patch_input(minicpm_v2::patch_rows(processed.pixels[0]));
  for (size_t k = 1; k < processed.pixels.size(); ++k)
    out.parts.push_back(as_patch_input(minicpm_v2::patch_rows(processed.pixels[k])));
  if (processed.plan.sliced) {
    out.parts_rows = processed.plan.grid_rows;
    out.parts_cols = processed.plan.grid_cols;
  }
  return out;
}
#endif

}  // namespace

void MiniCpmV2Family::load_vision(const ModelConfig& cfg, int threads) {
  if (!tower_) tower_.reset(new MiniCpmV2VisionTower(cfg, settings_, threads));
}

ImagePreprocessor MiniCpmV2Family::image_preprocessor() const {
#if GSURG_HAVE_PREPROCESS
  const minicpm_v2::SliceConfig cfg = minicpm_v2::SliceConfig::from_json(settings_.image_processor);
  return [cfg](const Image& image) { return minicpm_v2_patches(image, cfg); };
#else
  part_missing("preprocess", "--image", "--pixel-values");
#endif
}

std::vector<const PatchInput*> minicpm_v2_grids(const std::vector<PatchInput>& images, bool column_major) {
  std::vector<const PatchInput*> out;
  for (const PatchInput& img : images) {
    out.push_back(&img);
    const int rows = img.parts_rows, cols = img.parts_cols;
    if (static_cast<size_t>(rows) * static_cast<size_t>(cols) != img.parts.size())
      throw std::logic_error("an image's parts do not fill its parts_rows x parts_cols");
    if (!column_major) {
      for (const PatchInput& part : img.parts) out.push_back(&part);
      continue;
    }
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < rows; ++r) out.push_back(&img.parts[static_cast<size_t>(r) * cols + c]);
    }
  }
  return out;
}

std::vector<NetInput> MiniCpmV2Family::fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                                   const std::vector<PatchInput>& images,
                                                   std::vector<float>& embeds) const {
  if (!tower_) throw std::logic_error("fuse_images before load_vision");
  check_prompt(ids, images);
  const std::vector<std::pair<int, int>> spans = minicpm_v2_image_spans(ids, settings_.prompt);
  const std::vector<const PatchInput*> grids = minicpm_v2_grids(images, settings_.column_major);
  const size_t h = static_cast<size_t>(cfg.hidden_size);
  for (size_t k = 0; k < grids.size(); ++k) {
    const std::vector<float> rows = tower_->encode(*grids[k]);
    const size_t first = static_cast<size_t>(spans[k].first);
    const size_t count = static_cast<size_t>(spans[k].second - spans[k].first);
    if (rows.size() != count * h) throw std::logic_error("a resampler output of another size than its span");
    std::memcpy(&embeds[first * h], rows.data(), count * h * sizeof(float));
  }
  return {};
}

std::unique_ptr<Positions> MiniCpmV2Family::positions(const ModelConfig& cfg, const std::vector<int>&,
                                                      const std::vector<PatchInput>&) const {
  const DecoderSettings& d = cfg.decoder;
  return std::unique_ptr<Positions>(new TextPositions(d.rope_head_dim, d.rope_theta, d.rope_full_width));
}

}  // namespace gsurg
