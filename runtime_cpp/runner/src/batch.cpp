// The batch file's lines, its requests and its result lines (see batch.hpp).
#include "gsurg/batch.hpp"

#include <cerrno>
#include <cstring>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"

#ifdef _WIN32
#include <fcntl.h>
#include <io.h>
#endif

namespace gsurg {

namespace {

const char kKeys[] = "id, prompt, ids, images, gen";
const size_t kQuoted = 60;  // the most of a bad value an error quotes

// A JSON value as an error quotes it: its text, cut to kQuoted characters.
std::string quoted(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kQuoted) text = text.substr(0, kQuoted) + "...";
  return text;
}

[[noreturn]] void bad(const std::string& key, const std::string& what, const nlohmann::json& value) {
  throw Error("key \"" + key + "\" " + what + ", not " + quoted(value));
}

int64_t integer_in(const std::string& key, const nlohmann::json& value, int64_t lo, int64_t hi) {
  const std::string range = "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!value.is_number_integer()) bad(key, range, value);
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) bad(key, range, value);
    return static_cast<int64_t>(u);
  }
  const int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) bad(key, range, value);
  return v;
}

bool is_absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return true;
#ifdef _WIN32
  if (!path.empty() && path[0] == '\\') return true;
  if (path.size() >= 2 && path[1] == ':') return true;
#endif
  return false;
}

// nlohmann's parse error without its "[json.exception.parse_error.N] " prefix, cut like a quoted value.
std::string parse_message(const nlohmann::json::parse_error& err) {
  std::string text = err.what();
  const size_t close = text.find("] ");
  if (text.compare(0, 1, "[") == 0 && close != std::string::npos) text = text.substr(close + 2);
  if (text.size() > 4 * kQuoted) text = text.substr(0, 4 * kQuoted) + "...";
  return text;
}

}  // namespace

std::string folder_of(const std::string& path) {
#ifdef _WIN32
  const size_t cut = path.find_last_of("/\\");
#else
  const size_t cut = path.find_last_of('/');
#endif
  if (cut == std::string::npos) return "";
  return cut == 0 ? path.substr(0, 1) : path.substr(0, cut);
}

void parse_batch_request(const std::string& text, const std::string& base_dir, BatchRequest& req) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& err) {
    throw Error("not valid JSON: " + parse_message(err));
  }
  if (!doc.is_object()) throw Error("a request is a JSON object {...}, not " + quoted(doc));
  // The id first, so that an error in the rest of the line still names the request it belongs to.
  auto id = doc.find("id");
  if (id != doc.end()) {
    if (!id->is_string() && !id->is_number() && !id->is_null()) bad("id", "must be a string or a number", *id);
    req.id = *id;
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& value = it.value();
    if (key == "id") {
      continue;
    } else if (key == "prompt") {
      if (!value.is_string()) bad(key, "must be a string", value);
      req.prompt = value.get<std::string>();
      if (req.prompt.find_first_not_of(" \t\r\n") == std::string::npos) throw Error("the prompt is empty");
      req.has_prompt = true;
    } else if (key == "ids") {
      if (!value.is_array()) bad(key, "must be a list of token ids", value);
      if (value.empty()) throw Error("key \"ids\" is an empty list");
      req.ids.clear();
      for (size_t i = 0; i < value.size(); ++i)
        req.ids.push_back(static_cast<int>(integer_in("ids[" + std::to_string(i) + "]", value[i], 0,
                                                      2147483647LL)));
      req.has_ids = true;
    } else if (key == "images") {
      if (!value.is_array()) bad(key, "must be a list of image file names", value);
      req.images.clear();
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string name = "images[" + std::to_string(i) + "]";
        if (!value[i].is_string()) bad(name, "must be a file name (a string)", value[i]);
        const std::string path = value[i].get<std::string>();
        if (path.empty()) throw Error("key \"" + name + "\" is an empty file name");
        req.images.push_back(base_dir.empty() || is_absolute(path) ? path : join_path(base_dir, path));
      }
    } else if (key == "gen") {
      req.gen = static_cast<int>(integer_in(key, value, 1, 1 << 30));
    } else {
      throw Error("unknown key \"" + key + "\" (a request has " + kKeys + ")");
    }
  }
  if (req.has_prompt == req.has_ids) throw Error("give exactly one of \"prompt\" and \"ids\"");
}

BatchLines::BatchLines(const std::string& path) : path_(path) {
  if (path == "-") {
#ifdef _WIN32
    _setmode(_fileno(stdin), _O_BINARY);  // the bytes as sent: no \r\n folding, no end at ^Z
#endif
    file_ = stdin;
    return;
  }
  folder_ = folder_of(path);
  const std::string problem = file_problem(path);
  if (!problem.empty()) throw Error(path + ": " + problem + " (the --batch file)");
  file_ = fopen_utf8(path, "rb");
  if (file_ == nullptr) throw Error(path + ": " + std::strerror(errno) + " (the --batch file)");
  owned_ = true;
}

BatchLines::~BatchLines() {
  if (owned_) std::fclose(file_);
}

bool BatchLines::next(std::string& text, bool& too_long) {
  while (!at_end_) {
    text.clear();
    too_long = false;
    int c = 0;
    bool any = false;
    while ((c = std::getc(file_)) != EOF) {
      any = true;
      if (c == '\n') break;
      if (text.size() < kMaxBatchLine) text.push_back(static_cast<char>(c));
      else too_long = true;
    }
    if (c == EOF) {
      if (std::ferror(file_)) throw Error((path_ == "-" ? std::string("stdin") : path_) + ": read error");
      at_end_ = true;
      if (!any) return false;
    }
    ++line_;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (line_ == 1 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
    if (too_long || text.find_first_not_of(" \t\r") != std::string::npos) return true;
  }
  return false;
}

std::string batch_result_json(const BatchResult& r) {
  nlohmann::ordered_json out;
  out["id"] = nlohmann::ordered_json(r.id);
  out["line"] = r.line;
  out["prompt_tokens"] = r.prompt_tokens;
  if (r.print_prompt_ids) out["prompt_ids"] = r.prompt_ids;
  out["tokens"] = r.tokens;
  if (r.has_text) out["text"] = r.text;
  else out["text"] = nullptr;
  out["stop"] = r.stop;
  out["error"] = r.error;
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gsurg
