// penguin_vl_run: the program's entry. Gets the arguments as UTF-8 on every platform (on Windows from
// GetCommandLineW + CommandLineToArgvW, converted from UTF-16, with the console switched to UTF-8 output
// and stdout in binary mode so the streamed bytes are exact), runs cli.hpp's run(), and turns every error
// into one line on stderr: exit 2 for bad input (pvl::Error), 1 for anything unexpected. Never a crash.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "pvl/cli.hpp"
#include "pvl/error.hpp"

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>  // before shellapi.h, which needs its types
#include <fcntl.h>
#include <io.h>
#include <shellapi.h>
#endif

namespace {

std::vector<std::string> utf8_args(int argc, char** argv) {
  std::vector<std::string> out;
#ifdef _WIN32
  (void)argc;
  (void)argv;
  int n = 0;
  wchar_t** wide = CommandLineToArgvW(GetCommandLineW(), &n);
  if (wide == nullptr) throw pvl::Error("cannot read the command line");
  for (int i = 0; i < n; ++i) {
    int len = WideCharToMultiByte(CP_UTF8, 0, wide[i], -1, nullptr, 0, nullptr, nullptr);
    std::string s(len > 0 ? static_cast<size_t>(len) : 1u, '\0');
    if (len > 0) WideCharToMultiByte(CP_UTF8, 0, wide[i], -1, &s[0], len, nullptr, nullptr);
    s.resize(len > 0 ? static_cast<size_t>(len - 1) : 0u);  // drop the terminating NUL
    out.push_back(s);
  }
  LocalFree(wide);
#else
  for (int i = 0; i < argc; ++i) out.emplace_back(argv[i]);
#endif
  return out;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef _WIN32
  SetConsoleOutputCP(CP_UTF8);
  _setmode(_fileno(stdout), _O_BINARY);
#endif
  try {
    pvl::CliArgs args = pvl::parse_args(utf8_args(argc, argv));
    if (args.help) {
      std::fputs(pvl::usage(), stdout);
      return 0;
    }
    return pvl::run(args, stdout, stderr);
  } catch (const pvl::Error& err) {
    std::fflush(stdout);
    std::fprintf(stderr, "penguin_vl_run: error: %s\n", err.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "penguin_vl_run: error: out of memory\n");
    return 2;
  } catch (const std::exception& err) {
    std::fflush(stdout);
    std::fprintf(stderr, "penguin_vl_run: internal error: %s\n", err.what());
    return 1;
  }
}
