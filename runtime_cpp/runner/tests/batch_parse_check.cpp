// batch_parse_check: the batch mode's contract where it needs no model (runner/include/gsurg/batch.hpp).
//   1. Request lines: every key and its type, exactly one of "prompt" / "ids", the id kept from a line that
//      is otherwise bad, relative image names resolved against the batch file's folder and absolute ones
//      kept; each bad line refused with a message naming the key or the JSON problem.
//   2. The lines of a file: line numbers counted over blank lines, \r\n endings, a byte order mark, a last
//      line without an end, a line over kMaxBatchLine marked too long (and the next line read whole);
//      a missing file and a folder refused naming the path.
//   3. Result lines: the keys in their order, null text without a tokenizer, prompt_ids only when asked,
//      invalid UTF-8 in the text written as U+FFFD (the line stays JSON), an id echoed as given.
// argv[1]: a scratch folder. Exit 0 when every check holds, 1 otherwise.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gsurg/batch.hpp"
#include "gsurg/error.hpp"

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

// The request a line makes, or the error it gives ("" when none).
std::string parse(const std::string& line, gsurg::BatchRequest& req, const std::string& base = "") {
  req = gsurg::BatchRequest();
  req.line = 1;
  try {
    gsurg::parse_batch_request(line, base, req);
  } catch (const gsurg::Error& err) {
    return err.what();
  }
  return "";
}

void check_requests() {
  gsurg::BatchRequest req;
  expect(parse(R"({"id": 7, "prompt": "largest of 3 9?"})", req).empty() && req.has_prompt && !req.has_ids &&
             req.prompt == "largest of 3 9?" && req.id == 7 && req.gen == 0 && req.images.empty(),
         "a prompt with an id");
  expect(parse(R"({"ids": [1, 2, 2147483647], "gen": 5})", req).empty() && req.has_ids &&
             req.ids == std::vector<int>({1, 2, 2147483647}) && req.gen == 5 && req.id.is_null(),
         "ids and gen, no id (null)");
  expect(parse(R"({"id": "q-1", "prompt": "x", "images": ["a.png", "/abs/b.jpg", "sub/c.png"]})", req,
               "/data/batch").empty() &&
             req.images == std::vector<std::string>({"/data/batch/a.png", "/abs/b.jpg", "/data/batch/sub/c.png"}),
         "relative image names resolved against the batch file's folder, absolute ones kept");
  expect(parse(R"({"prompt": "x", "images": ["a.png"]})", req).empty() && req.images[0] == "a.png",
         "no folder (stdin): image names as given");
  expect(parse(R"({"id": null, "prompt": "x", "images": []})", req).empty() && req.images.empty(),
         "an empty image list and a null id");
  expect(parse("  {\"prompt\": \"\xC3\xA9t\xC3\xA9 \xF0\x9F\x99\x82\"}  ", req).empty() &&
             req.prompt == "\xC3\xA9t\xC3\xA9 \xF0\x9F\x99\x82",
         "UTF-8 text and white space around the object");

  struct Bad {
    std::string line, message;
  };
  const std::vector<Bad> bad = {
      {"{\"prompt\": \"x\"", "not valid JSON: "},
      {"", "not valid JSON: "},
      {"{\"prompt\": \"x\"} {}", "not valid JSON: "},
      {"{\"prompt\": \"\xFF\"}", "not valid JSON: "},
      {"[1, 2]", "a request is a JSON object {...}, not [1,2]"},
      {"\"hi\"", "a request is a JSON object {...}, not \"hi\""},
      {"{}", "give exactly one of \"prompt\" and \"ids\""},
      {R"({"prompt": "x", "ids": [1]})", "give exactly one of \"prompt\" and \"ids\""},
      {R"({"prompt": "x", "max_tokens": 3})",
       "unknown key \"max_tokens\" (a request has id, prompt, ids, images, gen)"},
      {R"({"prompt": 3})", "key \"prompt\" must be a string, not 3"},
      {R"({"prompt": " \t\n"})", "the prompt is empty"},
      {R"({"ids": []})", "key \"ids\" is an empty list"},
      {R"({"ids": "1,2"})", "key \"ids\" must be a list of token ids, not \"1,2\""},
      {R"({"ids": [1, -1]})", "key \"ids[1]\" must be an integer in [0, 2147483647], not -1"},
      {R"({"ids": [2147483648]})", "key \"ids[0]\" must be an integer in [0, 2147483647], not 2147483648"},
      {R"({"ids": [1.0]})", "key \"ids[0]\" must be an integer in [0, 2147483647], not 1.0"},
      {R"({"ids": [true]})", "key \"ids[0]\" must be an integer in [0, 2147483647], not true"},
      {R"({"ids": [1], "gen": 0})", "key \"gen\" must be an integer in [1, 1073741824], not 0"},
      {R"({"ids": [1], "gen": "8"})", "key \"gen\" must be an integer in [1, 1073741824], not \"8\""},
      {R"({"ids": [1], "gen": 18446744073709551615})", "key \"gen\" must be an integer in [1, 1073741824]"},
      {R"({"ids": [1], "images": "a.png"})", "key \"images\" must be a list of image file names, not \"a.png\""},
      {R"({"ids": [1], "images": [3]})", "key \"images[0]\" must be a file name (a string), not 3"},
      {R"({"ids": [1], "images": [""]})", "key \"images[0]\" is an empty file name"},
      {R"({"ids": [1], "id": {"a": 1}})", "key \"id\" must be a string or a number, not {\"a\":1}"},
      {R"({"ids": [1], "id": [1, 2]})", "key \"id\" must be a string or a number, not [1,2]"},
  };
  for (const Bad& b : bad) {
    const std::string got = parse(b.line, req);
    expect(got.compare(0, b.message.size(), b.message) == 0,
           "refused: " + b.line.substr(0, 50) + " -> \"" + got + "\"");
  }
  const std::string long_value(200, 'x');
  const std::string got = parse("{\"prompt\": [\"" + long_value + "\"]}", req);
  expect(got.size() < 120 && got.find("...") != std::string::npos, "a long bad value is quoted cut: " + got);
  // the id of a line that is otherwise bad still names it
  parse(R"({"id": "keep", "ids": [], "prompt": "x"})", req);
  expect(req.id == "keep", "the id is kept from a bad line");
}

std::vector<std::string> read_all(const std::string& path, std::vector<int>* numbers = nullptr,
                                  std::vector<bool>* long_flags = nullptr) {
  gsurg::BatchLines lines(path);
  std::vector<std::string> out;
  std::string text;
  bool too_long = false;
  while (lines.next(text, too_long)) {
    out.push_back(too_long ? "<long>" : text);
    if (numbers != nullptr) numbers->push_back(lines.line());
    if (long_flags != nullptr) long_flags->push_back(too_long);
  }
  return out;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

void check_lines(const std::string& scratch) {
  const std::string path = scratch + "/batch_lines.jsonl";
  write(path, "\xEF\xBB\xBF{\"a\": 1}\r\n\n   \r\n{\"b\": 2}\n\t\n{\"c\": 3}");
  std::vector<int> numbers;
  const std::vector<std::string> got = read_all(path, &numbers);
  expect(got == std::vector<std::string>({"{\"a\": 1}", "{\"b\": 2}", "{\"c\": 3}"}),
         "BOM and \\r\\n dropped, blank lines skipped, a last line without an end read");
  expect(numbers == std::vector<int>({1, 4, 6}), "line numbers count the blank lines");
  expect(gsurg::BatchLines(path).folder() == scratch, "the folder of the batch file");

  write(path, "{\"a\": 1}\n" + std::string(gsurg::kMaxBatchLine + 10, ' ') + "x\n{\"b\": 2}\n");
  std::vector<bool> flags;
  numbers.clear();
  const std::vector<std::string> long_got = read_all(path, &numbers, &flags);
  expect(long_got == std::vector<std::string>({"{\"a\": 1}", "<long>", "{\"b\": 2}"}) &&
             flags == std::vector<bool>({false, true, false}) && numbers == std::vector<int>({1, 2, 3}),
         "a line over kMaxBatchLine is marked too long, the next one read whole");

  write(path, "");
  expect(read_all(path).empty(), "an empty file has no requests");

  for (const std::string& unreadable : {scratch + "/absent.jsonl", scratch}) {
    std::string error;
    try {
      gsurg::BatchLines lines(unreadable);
    } catch (const gsurg::Error& err) {
      error = err.what();
    }
    expect(error.compare(0, unreadable.size() + 2, unreadable + ": ") == 0 &&
               error.find("(the --batch file)") != std::string::npos,
           "refused, naming the path: " + error);
  }
  expect(gsurg::folder_of("a.jsonl").empty() && gsurg::folder_of("/a.jsonl") == "/" &&
             gsurg::folder_of("x/y/a.jsonl") == "x/y",
         "folder_of");
}

void check_results() {
  gsurg::BatchResult r;
  r.line = 3;
  r.id = "q3";
  r.prompt_tokens = 4;
  r.tokens = {5, 6, 334};
  r.has_text = true;
  r.text = " 83";
  r.stop = "eos";
  expect(gsurg::batch_result_json(r) ==
             R"({"id":"q3","line":3,"prompt_tokens":4,"tokens":[5,6,334],"text":" 83","stop":"eos","error":""})",
         "a result line, its keys in order");
  r.print_prompt_ids = true;
  r.prompt_ids = {1, 2};
  r.has_text = false;
  r.id = 12;
  expect(gsurg::batch_result_json(r) ==
             R"({"id":12,"line":3,"prompt_tokens":4,"prompt_ids":[1,2],"tokens":[5,6,334],"text":null,)"
             R"("stop":"eos","error":""})",
         "prompt_ids when asked, null text without a tokenizer, a numeric id");
  r = gsurg::BatchResult();
  r.has_text = true;
  r.text = "a\xFF" "b\xE2\x82";
  const std::string line = gsurg::batch_result_json(r);
  bool parsed = false;
  try {
    parsed = nlohmann::json::parse(line)["text"] == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD";
  } catch (const nlohmann::json::exception&) {
  }
  expect(parsed && line.find('\n') == std::string::npos, "invalid UTF-8 in the text written as U+FFFD: " + line);
  r.error = "line 9: \"quoted\"\nsecond";
  const std::string error_line = gsurg::batch_result_json(r);
  expect(error_line.find('\n') == std::string::npos &&
             nlohmann::json::parse(error_line)["error"] == "line 9: \"quoted\"\nsecond",
         "an error with quotes and a line break stays one JSON line");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: batch_parse_check SCRATCH_DIR\n");
    return 2;
  }
  check_requests();
  check_lines(argv[1]);
  check_results();
  std::printf("%s\n", g_failures == 0 ? "PASSED" : "FAILED");
  return g_failures == 0 ? 0 : 1;
}
