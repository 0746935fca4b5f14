// Qwen2's pre-tokenizer split, matched by hand over code points. The regex (HF `Split` with behavior
// "Isolated", compiled by Oniguruma) is
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Every match and every gap between matches becomes one piece, in order, so the pieces tile the text.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gsurg {

// The regex string as it appears in tokenizer.json (the only Split pattern load() accepts).
extern const char* const kQwen2SplitRegex;

// Pieces of valid UTF-8 text as byte ranges [begin, end).
std::vector<std::pair<size_t, size_t>> qwen2_split(std::string_view text);

}  // namespace gsurg
