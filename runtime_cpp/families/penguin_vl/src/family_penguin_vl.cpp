// The Penguin-VL family's run: vision nets on first use, image preprocessing, the prompt checks, image
// features over the image-token rows, 1-D decoder positions (see family_penguin_vl.hpp).
#include "gsurg/family_penguin_vl.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "gsurg/error.hpp"
#include "gsurg/optional_parts.hpp"

#if GSURG_HAVE_PREPROCESS
#include "gsurg/image.hpp"
#include "gsurg/penguin_vl_image_processor.hpp"
#endif

namespace gsurg {

void PenguinVlFamily::load_vision(const ModelConfig& cfg, int threads) {
  if (!tower_) tower_.reset(new PenguinVisionTower(cfg, settings_, threads));
}

ImagePreprocessor PenguinVlFamily::image_preprocessor() const {
#if GSURG_HAVE_PREPROCESS
  const PenguinVlImageConfig proc = PenguinVlImageConfig::from_json(settings_.image_processor);
  return patch_preprocessor([proc](const Image& image) { return penguin_vl_preprocess(image, proc); });
#else
  part_missing("preprocess", "--image", "--pixel-values");
#endif
}

void PenguinVlFamily::check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const {
  int image_rows = 0;
  for (const PatchInput& img : images) image_rows += img.grid_h * img.grid_w;
  const int image_ids = count_id(ids, settings_.image_token);
  if (image_ids != image_rows)
    throw Error("the prompt has " + std::to_string(image_ids) + " image tokens (id " +
                std::to_string(settings_.image_token) + ") but the images give " +
                std::to_string(image_rows) + " feature rows");
}

std::vector<NetInput> PenguinVlFamily::fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                                   const std::vector<PatchInput>& images,
                                                   std::vector<float>& embeds) const {
  if (!tower_) throw std::logic_error("fuse_images before load_vision");
  const size_t h = static_cast<size_t>(cfg.hidden_size);
  size_t next = 0;
  for (const PatchInput& img : images) {
    std::vector<float> features = tower_->encode(img);
    for (size_t r = 0; r < features.size() / h; ++r) {
      while (ids[next] != settings_.image_token) ++next;
      std::memcpy(&embeds[next * h], &features[r * h], h * sizeof(float));
      ++next;
    }
  }
  return {};
}

std::unique_ptr<Positions> PenguinVlFamily::positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                                      const std::vector<PatchInput>& images) const {
  (void)ids;
  (void)images;
  const DecoderSettings& d = cfg.decoder;
  return std::unique_ptr<Positions>(new TextPositions(d.rope_head_dim, d.rope_theta, d.rope_full_width));
}

}  // namespace gsurg
