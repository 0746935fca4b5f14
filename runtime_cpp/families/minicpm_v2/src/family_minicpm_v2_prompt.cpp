// MiniCPM-V-2's chat text, its ids and its image spans (see family_minicpm_v2.hpp); the text is
// graphsurgeon/models/minicpm_v2/prompt.py's (image_placeholder, chat_prompt), the official chat's.
#include "gsurg/error.hpp"
#include "gsurg/family_minicpm_v2.hpp"
#include "gsurg/optional_parts.hpp"

#if GSURG_HAVE_TOKENIZER
#include "gsurg/tokenizer.hpp"
#endif

namespace gsurg {

namespace {

// The number of grids (spans) of the images: each image's overview and slices.
size_t grid_count(const std::vector<PatchInput>& images) {
  size_t n = 0;
  for (const PatchInput& img : images) n += 1 + img.parts.size();
  return n;
}

}  // namespace

std::string minicpm_v2_image_placeholder(const MiniCpmV2Prompt& p, int query_num, int cols, int rows) {
  std::string one = p.image_start;
  for (int i = 0; i < query_num; ++i) one += p.placeholder;
  one += p.image_end;
  if (cols < 1 || rows < 1) return one;
  std::string out = one + p.slice_start;
  for (int r = 0; r < rows; ++r) {
    if (r > 0) out += "\n";
    for (int c = 0; c < cols; ++c) out += one;
  }
  return out + p.slice_end;
}

std::string minicpm_v2_chat_prompt(const MiniCpmV2Prompt& p, const std::string& user_text,
                                   const std::string& placeholders) {
  const std::string content = placeholders.empty() ? user_text : placeholders + "\n" + user_text;
  return p.user + content + p.assistant;
}

std::vector<std::pair<int, int>> minicpm_v2_image_spans(const std::vector<int>& ids, const MiniCpmV2Prompt& p) {
  std::vector<std::pair<int, int>> spans;
  int open = -1;
  for (int i = 0; i < static_cast<int>(ids.size()); ++i) {
    const int id = ids[static_cast<size_t>(i)];
    if (id == p.image_start_id) {
      if (open >= 0)
        throw Error("the prompt has " + p.image_start + " (id " + std::to_string(id) + ") at token " +
                    std::to_string(i) + " inside the image span opened at token " + std::to_string(open));
      open = i;
    } else if (id == p.image_end_id) {
      if (open < 0)
        throw Error("the prompt has " + p.image_end + " (id " + std::to_string(id) + ") at token " +
                    std::to_string(i) + " without an " + p.image_start + " before it");
      spans.emplace_back(open + 1, i);
      open = -1;
    }
  }
  if (open >= 0)
    throw Error("the prompt's " + p.image_start + " at token " + std::to_string(open) + " has no " + p.image_end +
                " after it");
  return spans;
}

void MiniCpmV2Family::check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const {
  const MiniCpmV2Prompt& p = settings_.prompt;
  const std::vector<std::pair<int, int>> spans = minicpm_v2_image_spans(ids, p);
  const size_t grids = grid_count(images);
  if (spans.size() != grids)
    throw Error("the prompt has " + std::to_string(spans.size()) + " image spans (" + p.image_start + " ... " +
                p.image_end + ") but the " + std::to_string(images.size()) + " images given have " +
                std::to_string(grids) + " (an overview each, and their slices)");
  const int q = settings_.resampler.query_num;
  for (size_t k = 0; k < spans.size(); ++k) {
    if (spans[k].second - spans[k].first != q)
      throw Error("image span " + std::to_string(k) + " (tokens " + std::to_string(spans[k].first) + ".." +
                  std::to_string(spans[k].second - 1) + ") holds " +
                  std::to_string(spans[k].second - spans[k].first) + " tokens, not resampler.query_num " +
                  std::to_string(q));
  }
}

std::vector<int> MiniCpmV2Family::prompt_ids(const Tokenizer& tok, const std::string& user_text,
                                             const std::vector<PatchInput>& images) const {
#if GSURG_HAVE_TOKENIZER
  const MiniCpmV2Prompt& p = settings_.prompt;
  if (user_text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error("the prompt is empty");
  const struct {
    const std::string& text;
    const char* key;
    int id;
  } markers[] = {{p.image_start, "tokens.image_start", p.image_start_id},
                 {p.image_end, "tokens.image_end", p.image_end_id},
                 {p.slice_start, "tokens.slice_start", p.slice_start_id},
                 {p.slice_end, "tokens.slice_end", p.slice_end_id},
                 {p.placeholder, "tokens.placeholder", p.placeholder_id}};
  for (const auto& m : markers) {
    const int id = tok.token_id(m.text);
    if (id != m.id)
      throw Error(settings_.tokenizer_json + ": " +
                  (id < 0 ? std::string("no token \"") + m.text + "\""
                          : "\"" + m.text + "\" is id " + std::to_string(id)) +
                  ", but model.json " + m.key + " is " + std::to_string(m.id) +
                  " (the image placeholders need it)");
    if (m.id != p.placeholder_id && user_text.find(m.text) != std::string::npos)
      throw Error("the prompt text contains the image marker \"" + m.text + "\" (model.json " + m.key +
                  "); images are given with --image");
  }
  std::string placeholders;
  for (const PatchInput& img : images)
    placeholders += minicpm_v2_image_placeholder(p, settings_.resampler.query_num, img.parts_cols, img.parts_rows);
  std::vector<int> ids = tok.encode(minicpm_v2_chat_prompt(p, user_text, placeholders));
  const size_t grids = grid_count(images);
  const size_t got = static_cast<size_t>(count_id(ids, p.image_start_id));
  if (got != grids)  // e.g. a tokenizer that splits the marker into pieces
    throw Error("the tokenizer encodes the prompt's " + std::to_string(grids) + " \"" + p.image_start +
                "\" markers as " + std::to_string(got) + " tokens of id " + std::to_string(p.image_start_id) +
                " (model.json tokens.image_start)");
  return ids;
#else
  (void)tok;
  (void)user_text;
  (void)images;
  part_missing("tokenizer", "--prompt", "--ids");
#endif
}

}  // namespace gsurg
