// File access with UTF-8 paths on every platform (on Windows the path is widened and opened with
// _wfopen, so non-ASCII folder names work), and whole-file reads with errors that name the path.
// A path holding a NUL character names no file (fopen_utf8 fails with EINVAL, file_problem says so,
// read_file throws): the C calls would otherwise open the name cut at the NUL.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace gsurg {

// fopen with a UTF-8 path; returns nullptr on failure like fopen (errno set).
std::FILE* fopen_utf8(const std::string& path, const char* mode);

// The most a whole-file read takes (model.json, .param text, tokenizer.json, images, pixel dumps).
constexpr uint64_t kMaxWholeFile = uint64_t(256) << 20;

// The whole file as bytes; throws gsurg::Error("<path>: <reason>") when it cannot be read, when it is not a
// regular file (a FIFO is refused without waiting for a writer, a device without reading it) or when it holds
// more than max_bytes.
std::string read_file(const std::string& path, uint64_t max_bytes = kMaxWholeFile);

// Why the path is not a readable regular file ("no such file or directory", "is a FIFO (named pipe), not a
// regular file", ...), or "" when it is one.
std::string file_problem(const std::string& path);

// Joins a folder and a relative name with the platform's separator ('/' works on Windows too).
std::string join_path(const std::string& folder, const std::string& name);

#ifdef _WIN32
// UTF-8 -> UTF-16 for the wide Windows calls (_wfopen, CreateFileW, ...), and a NUL-terminated UTF-16
// string -> UTF-8.
std::wstring widen(const std::string& utf8);
std::string narrow(const wchar_t* utf16);
#endif

}  // namespace gsurg
