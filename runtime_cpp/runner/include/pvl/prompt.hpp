// The prompt as the reference builds it (examples/penguin_vl/processor.py: render_chat, user_prompt,
// expand_image_tokens; penguin-vl.md §6): one user turn, its images first, each rendered as the image
// token followed by "\n", then the text; "<|im_start|>{role}\n" + content + "<|im_end|>\n"; no system
// turn; the generation prompt "<|im_start|>assistant\n<think>\n\n</think>\n\n". Each image's placeholder
// is then repeated grid_h*grid_w times. The template's marker strings are the chat template's text; every
// id comes from the tokenizer (markers checked to exist) and model.json (the image id), never a constant.
#pragma once

#include <string>
#include <vector>

namespace pvl {

class Tokenizer;

// The rendered text with each image's placeholder expanded to its token count.
std::string chat_prompt(const std::string& user_text, const std::vector<int>& image_tokens,
                        const std::string& image_token);

#if PVL_HAVE_TOKENIZER
// Token ids of chat_prompt(...). image_id is model.json tokens.image; its string comes from the tokenizer.
// Throws pvl::Error when the text is empty, holds the image token itself, the tokenizer lacks a template
// marker, or the encoded ids do not hold exactly sum(image_tokens) image ids.
std::vector<int> prompt_ids(const Tokenizer& tok, const std::string& user_text,
    const std::vector<int>& image_tokens,
                            int image_id);
#endif

// Number of ids equal to id.
int count_id(const std::vector<int>& ids, int id);

}  // namespace pvl
