// penguin_vl_run: the program's entry. Gets the arguments as UTF-8 on every platform, with a UTF-8 console
// and exact stdout bytes on Windows (pvl/console.hpp), runs cli.hpp's run(), and turns every error
// into one line on stderr: exit 2 for bad input (pvl::Error), 1 for anything unexpected. Never a crash.
#include <cstdio>
#include <exception>
#include <new>

#include "pvl/cli.hpp"
#include "pvl/console.hpp"
#include "pvl/error.hpp"
#include "pvl/sanitizer_defaults.hpp"

int main(int argc, char** argv) {
  pvl::use_utf8_console();
  try {
    pvl::CliArgs args = pvl::parse_args(pvl::utf8_args(argc, argv));
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
