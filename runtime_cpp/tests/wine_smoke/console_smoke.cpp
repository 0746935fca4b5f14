// console_smoke: proves that a program built by this project's toolchain runs where the tests run (natively,
// or a mingw .exe under wine) with the three things the runtime relies on:
//   1. std::thread (mingw's posix thread model / winpthreads, linked statically);
//   2. UTF-8 command-line arguments (on Windows read from GetCommandLineW, converted to UTF-8);
//   3. UTF-8 console output (on Windows the console code page is set to UTF-8; bytes reach a pipe unchanged);
//   4. a file under a non-ASCII path opened with pvl::read_file (the Windows branch uses _wfopen).
// Usage: pvl_console_smoke [TEXT [FILE]]. Prints "threads: <sum>", "utf8: <CJK/emoji literal>",
// "arg: TEXT" and "file: <FILE's first line>"; exits 1 when a step fails.
// The ctest checks the output against literals written in CMakeLists.txt, not against this file's strings.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "pvl/error.hpp"
#include "pvl/files.hpp"

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#include <shellapi.h>
#endif

namespace {

// The command-line arguments as UTF-8 strings (Windows: from the UTF-16 command line, not the ANSI argv).
std::vector<std::string> utf8_args(int argc, char** argv) {
  std::vector<std::string> out;
#ifdef _WIN32
  (void)argc;
  (void)argv;
  int n = 0;
  LPWSTR* wargv = CommandLineToArgvW(GetCommandLineW(), &n);
  if (wargv == nullptr) return out;
  for (int i = 0; i < n; ++i) {
    int len = WideCharToMultiByte(CP_UTF8, 0, wargv[i], -1, nullptr, 0, nullptr, nullptr);
    std::string s(len > 0 ? static_cast<size_t>(len - 1) : 0, '\0');
    if (len > 1) WideCharToMultiByte(CP_UTF8, 0, wargv[i], -1, &s[0], len, nullptr, nullptr);
    out.push_back(s);
  }
  LocalFree(wargv);
#else
  for (int i = 0; i < argc; ++i) out.emplace_back(argv[i]);
#endif
  return out;
}

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
#ifdef _WIN32
  SetConsoleOutputCP(CP_UTF8);
#endif
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
  const std::vector<std::string> args = utf8_args(argc, argv);
  if (args.size() > 1) std::printf("arg: %s\n", args[1].c_str());
  if (args.size() > 2) {
    try {
      std::string text = pvl::read_file(args[2]);
      std::printf("file: %s\n", text.substr(0, text.find('\n')).c_str());
    } catch (const pvl::Error& e) {
      std::fprintf(stderr, "read failed: %s\n", e.what());
      return 1;
    }
  }
  std::fflush(stdout);
  return 0;
}
