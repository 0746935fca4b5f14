// The program's entry (penguin_vl_run; PVL_PROGRAM_NAME names it, so another name can be the same program:
// the family comes from model.json). Gets the arguments as UTF-8 on every platform, with a UTF-8 console
// and exact stdout bytes on Windows (pvl/console.hpp), runs cli.hpp's run(), and turns every error
// into one line on stderr: exit 2 for bad input (pvl::Error), 1 for anything unexpected. Never a crash.
#include <cstdio>
#include <exception>
#include <new>

#include "pvl/cli.hpp"
#include "pvl/console.hpp"
#include "pvl/error.hpp"
#include "pvl/family_registry.hpp"
#include "pvl/sanitizer_defaults.hpp"

#ifndef PVL_PROGRAM_NAME
#define PVL_PROGRAM_NAME "penguin_vl_run"
#endif

int main(int argc, char** argv) {
  const char* const name = PVL_PROGRAM_NAME;
  pvl::set_program_name(name);
  pvl::use_utf8_console();
  try {
    pvl::CliArgs args = pvl::parse_args(pvl::utf8_args(argc, argv));
    if (args.help) {
      std::fputs(pvl::usage().c_str(), stdout);
      return 0;
    }
    return pvl::run(args, stdout, stderr);
  } catch (const pvl::Error& err) {
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
