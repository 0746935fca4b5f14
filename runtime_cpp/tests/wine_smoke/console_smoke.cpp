// console_smoke: proves that a program built by this project's toolchain runs where the tests run (natively,
// or a mingw .exe under wine) with the three things the runtime relies on:
//   1. std::thread (mingw's posix thread model / winpthreads, linked statically);
//   2. UTF-8 command-line arguments (gsurg::utf8_args: on Windows from GetCommandLineW, converted to UTF-8);
//   3. UTF-8 console output (gsurg::use_utf8_console: on Windows code page UTF-8; bytes reach a pipe unchanged);
//   4. a file under a non-ASCII path opened with gsurg::read_file (the Windows branch uses _wfopen).
// Usage: gsurg_console_smoke [TEXT [FILE]]. Prints "threads: <sum>", "utf8: <CJK/emoji literal>",
// "arg: TEXT" and "file: <FILE's first line>"; exits 1 when a step fails.
// The ctest checks the output against literals written in CMakeLists.txt, not against this file's strings.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gsurg/console.hpp"
#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "gsurg/sanitizer_defaults.hpp"

namespace {

// Sum of 1..n split over `workers` threads; the caller compares it with n(n+1)/2.
long long threaded_sum(long long n, int workers) {
  std::vector<long long> partial(static_cast<size_t>(workers), 0);
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&partial, n, w, workers] {
      for (long long i = w + 1; i <= n; i += workers) partial[static_cast<size_t>(w)] += i;
    });
  }
  for (auto& t : pool) t.join();
  long long total = 0;
  for (long long p : partial) total += p;
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  gsurg::use_utf8_console();
  const long long n = 100000;
  const long long sum = threaded_sum(n, 4);
  if (sum != n * (n + 1) / 2) {
    std::fprintf(stderr, "threaded sum wrong: %lld\n", sum);
    return 1;
  }
  std::printf("threads: %lld\n", sum);
  // "漢字 かな 한글 😀" spelled as UTF-8 bytes so the source encoding cannot matter.
  std::printf("utf8: %s\n",
              "\xE6\xBC\xA2\xE5\xAD\x97 \xE3\x81\x8B\xE3\x81\xAA \xED\x95\x9C\xEA\xB8\x80 \xF0\x9F\x98\x80");
  const std::vector<std::string> args = gsurg::utf8_args(argc, argv);
  if (args.size() > 1) std::printf("arg: %s\n", args[1].c_str());
  if (args.size() > 2) {
    try {
      std::string text = gsurg::read_file(args[2]);
      std::printf("file: %s\n", text.substr(0, text.find('\n')).c_str());
    } catch (const gsurg::Error& e) {
      std::fprintf(stderr, "read failed: %s\n", e.what());
      return 1;
    }
  }
  std::fflush(stdout);
  return 0;
}
