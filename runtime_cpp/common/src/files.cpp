#include "pvl/files.hpp"

#include <cerrno>
#include <cstring>
#include <memory>

#include "pvl/error.hpp"

#ifdef _WIN32
#include <windows.h>
#include <sys/stat.h>
#else
#include <sys/stat.h>
#endif

namespace pvl {

#ifdef _WIN32
std::wstring widen(const std::string& utf8) {
  if (utf8.empty()) return std::wstring();
  int n = MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), nullptr, 0);
  std::wstring out(static_cast<size_t>(n), L'\0');
  MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), &out[0], n);
  return out;
}

std::string narrow(const wchar_t* utf16) {
  const int len = WideCharToMultiByte(CP_UTF8, 0, utf16, -1, nullptr, 0, nullptr, nullptr);
  if (len <= 1) return std::string();  // the count includes the terminating NUL
  std::string out(static_cast<size_t>(len), '\0');
  WideCharToMultiByte(CP_UTF8, 0, utf16, -1, &out[0], len, nullptr, nullptr);
  out.resize(static_cast<size_t>(len - 1));
  return out;
}
#endif

std::FILE* fopen_utf8(const std::string& path, const char* mode) {
  if (path.find('\0') != std::string::npos) {  // the C call would open the name cut at the NUL
    errno = EINVAL;
    return nullptr;
  }
#ifdef _WIN32
  return _wfopen(widen(path).c_str(), widen(mode).c_str());
#else
  return std::fopen(path.c_str(), mode);
#endif
}

bool is_regular_file(const std::string& path) {
  if (path.find('\0') != std::string::npos) return false;
#ifdef _WIN32
  struct _stat64 st;
  if (_wstat64(widen(path).c_str(), &st) != 0) return false;
  return (st.st_mode & _S_IFREG) != 0;
#else
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  return S_ISREG(st.st_mode);
#endif
}

std::string read_file(const std::string& path) {
  if (path.find('\0') != std::string::npos) throw Error("a file name contains a NUL character");
  if (!is_regular_file(path)) {
    std::FILE* probe = fopen_utf8(path, "rb");
    if (probe == nullptr) throw Error(path + ": " + std::strerror(errno));
    std::fclose(probe);
    throw Error(path + ": not a regular file");
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(fopen_utf8(path, "rb"), &std::fclose);
  if (!f) throw Error(path + ": " + std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) data.append(buf, n);
  if (std::ferror(f.get())) throw Error(path + ": read failed");
  return data;
}

std::string join_path(const std::string& folder, const std::string& name) {
  if (folder.empty()) return name;
  char last = folder.back();
  if (last == '/' || last == '\\') return folder + name;
  return folder + "/" + name;
}

}  // namespace pvl
