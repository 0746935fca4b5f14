// The program's entry (gsurg_run; GSURG_PROGRAM_NAME names it, so a family's alias such as <family>_run is the
// same program: the family comes from model.json). Gets the arguments as UTF-8 on every platform, with a UTF-8 console
// and exact stdout bytes on Windows (gsurg/console.hpp), runs cli.hpp's run(), and turns every error
// into one line on stderr: exit 2 for bad input (gsurg::Error), 1 for anything unexpected. Never a crash.
#include <cstdio>
#include <exception>
#include <new>

#include "gsurg/cli.hpp"
#include "gsurg/console.hpp"
#include "gsurg/error.hpp"
#include "gsurg/family_registry.hpp"
#include "gsurg/sanitizer_defaults.hpp"

#ifndef GSURG_PROGRAM_NAME
#define GSURG_PROGRAM_NAME "gsurg_run"
#endif

int main(int argc, char** argv) {
  const char* const name = GSURG_PROGRAM_NAME;
  gsurg::set_program_name(name);
  gsurg::use_utf8_console();
  try {
    gsurg::CliArgs args = gsurg::parse_args(gsurg::utf8_args(argc, argv));
    if (args.help) {
      std::fputs(gsurg::usage().c_str(), stdout);
      return 0;
    }
    return gsurg::run(args, stdout, stderr);
  } catch (const gsurg::Error& err) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, err.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: out of memory\n", name);
    return 2;
  } catch (const std::exception& err) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: internal error: %s\n", name, err.what());
    return 1;
  }
}
