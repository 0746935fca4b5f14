// UTF-8 argv and console (see console.hpp).
#include "gsurg/console.hpp"

#include "gsurg/error.hpp"

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>  // before shellapi.h, which needs its types
#include <fcntl.h>
#include <io.h>
#include <shellapi.h>

#include <cstdio>

#include "gsurg/files.hpp"
#endif

namespace gsurg {

std::vector<std::string> utf8_args(int argc, char** argv) {
  std::vector<std::string> out;
#ifdef _WIN32
  (void)argc;
  (void)argv;
  int n = 0;
  wchar_t** wide = CommandLineToArgvW(GetCommandLineW(), &n);
  if (wide == nullptr) throw Error("cannot read the command line");
  for (int i = 0; i < n; ++i) out.push_back(narrow(wide[i]));
  LocalFree(wide);
#else
  for (int i = 0; i < argc; ++i) out.emplace_back(argv[i]);
#endif
  return out;
}

void use_utf8_console() {
#ifdef _WIN32
  SetConsoleOutputCP(CP_UTF8);
  _setmode(_fileno(stdout), _O_BINARY);
#endif
}

}  // namespace gsurg
