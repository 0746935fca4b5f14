// UTF-8 in and out of a program on every platform. On Windows the command line is read as UTF-16
// (GetCommandLineW + CommandLineToArgvW) and converted, since the ANSI argv loses what the code page
// cannot spell, and the console is switched to UTF-8 with stdout in binary mode so streamed bytes reach a
// pipe or file exactly. Elsewhere argv is already bytes and nothing needs switching.
#pragma once

#include <string>
#include <vector>

namespace gsurg {

// The program's arguments as UTF-8 strings, argv[0] first. Throws gsurg::Error when Windows cannot give the
// command line.
std::vector<std::string> utf8_args(int argc, char** argv);

// Windows: console output code page UTF-8, stdout binary. Elsewhere: nothing. Call once, first in main().
void use_utf8_console();

}  // namespace gsurg
