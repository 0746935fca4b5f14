// The batch mode's contract (--batch FILE; runner/README.md, "Batch mode"), the parts that need no model:
// reading the file line by line, one request per line, and writing one result line per request.
//
// A request line is a JSON object with the keys
//   "id"      any JSON value, echoed in the result (null when absent);
//   "prompt"  the text the family turns into prompt ids (its chat template, as --prompt), or
//   "ids"     the full prompt's token ids (as --ids): exactly one of the two;
//   "images"  file names (as --image), relative ones resolved against the batch file's folder (stdin: the
//             working folder); optional;
//   "gen"     at most this many new tokens (default: the command line's --gen).
// Any other key, a wrong type or value is an error of that line alone. A line holding only white space is
// skipped; a line may end in \r\n, the first may start with a UTF-8 byte order mark; a line longer than
// kMaxBatchLine bytes is an error (its text is not kept).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gsurg {

constexpr size_t kMaxBatchLine = size_t(16) << 20;

struct BatchRequest {
  int line = 0;  // 1-based line number in the file
  nlohmann::json id;  // null when the line gives none
  std::string prompt;
  bool has_prompt = false;
  std::vector<int> ids;
  bool has_ids = false;
  std::vector<std::string> images;  // resolved paths
  int gen = 0;                      // 0: the command line's --gen
};

// Fills req from one line's text (req.line already set): req.id as soon as the line is a JSON object with
// an "id", then the rest. Throws gsurg::Error (the message without the line number) when the line breaks
// the contract. base_dir: the folder relative image names are resolved against ("": as given).
void parse_batch_request(const std::string& text, const std::string& base_dir, BatchRequest& req);

// The folder part of a file name ("" when it has none): where a batch file's relative image names point.
std::string folder_of(const std::string& path);

// The request lines of a batch file or of stdin ("-"), read as bytes.
class BatchLines {
 public:
  // Throws gsurg::Error naming the file when it cannot be read (missing, a folder, no permission).
  explicit BatchLines(const std::string& path);
  ~BatchLines();
  BatchLines(const BatchLines&) = delete;
  BatchLines& operator=(const BatchLines&) = delete;

  // The next line that is not blank, without its line end: false at the end of the file. too_long: the
  // line was longer than kMaxBatchLine (text then holds its start only). Throws gsurg::Error on a read
  // error.
  bool next(std::string& text, bool& too_long);
  int line() const { return line_; }  // the number of the line next() returned
  const std::string& folder() const { return folder_; }

 private:
  std::string path_;
  std::string folder_;
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  bool at_end_ = false;
  int line_ = 0;
};

struct BatchResult {
  int line = 0;
  nlohmann::json id;
  int prompt_tokens = 0;
  std::vector<int> prompt_ids;  // written only with --print-ids
  bool print_prompt_ids = false;
  std::vector<int> tokens;      // the new tokens, an EOS included when reached
  bool has_text = false;        // false: no tokenizer, "text" is null
  std::string text;             // the answer before EOS (invalid UTF-8 written as U+FFFD)
  std::string stop;             // "eos", "length", "context" (the context limit); "" on error
  std::string error;            // "" on success, else "line N: <why>"
};

// One result as one line of JSON (no line end): id, line, prompt_tokens, [prompt_ids,] tokens, text,
// stop, error.
std::string batch_result_json(const BatchResult& result);

}  // namespace gsurg
