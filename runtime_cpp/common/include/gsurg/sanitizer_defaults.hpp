// Default sanitizer options of the runtime's programs, for the ASan/UBSan build (CMake GSURG_SANITIZE):
// include it in exactly one source file of each program (the one with main). Under AddressSanitizer an
// impossible allocation returns null (so operator new throws std::bad_alloc and the program reports
// "out of memory" with exit 2, as the release build does) instead of aborting; UBSan prints a stack.
// Without sanitizers the header defines nothing.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1"; }
#endif
