#include "gsurg/files.hpp"

#include <cerrno>
#include <cstring>
#include <memory>

#include "gsurg/error.hpp"

#ifdef _WIN32
#include <windows.h>
#include <sys/stat.h>
#else
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace gsurg {

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

namespace {

// What a non-regular file is, in words, from its stat mode.
const char* kind_of(unsigned mode) {
#ifdef _WIN32
  if ((mode & _S_IFDIR) != 0) return "a folder";
  return "not a regular file (a device or a pipe)";
#else
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
#endif
}

std::string too_large(const std::string& path, uint64_t limit) {
  return path + ": larger than " + std::to_string(limit >> 20) + " MiB, the most a whole-file read takes";
}

}  // namespace

std::string file_problem(const std::string& path) {
  if (path.find('\0') != std::string::npos) return "the name contains a NUL character";
#ifdef _WIN32
  struct _stat64 st;
  if (_wstat64(widen(path).c_str(), &st) != 0) return errno == ENOENT ? "no such file" : std::strerror(errno);
  if ((st.st_mode & _S_IFREG) == 0) return std::string("is ") + kind_of(st.st_mode) + ", not a regular file";
#else
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return errno == ENOENT ? "no such file" : std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return std::string("is ") + kind_of(st.st_mode) + ", not a regular file";
#endif
  return "";
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  if (path.find('\0') != std::string::npos) throw Error("a file name contains a NUL character");
#ifdef _WIN32
  struct _stat64 st;
  if (_wstat64(widen(path).c_str(), &st) != 0) throw Error(path + ": " + std::strerror(errno));
  if ((st.st_mode & _S_IFREG) == 0) throw Error(path + ": is " + kind_of(st.st_mode) + ", not a regular file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(fopen_utf8(path, "rb"), &std::fclose);
  if (!f) throw Error(path + ": " + std::strerror(errno));
#else
  // Checked before opening, and again on the open descriptor: open() itself would wait on a FIFO (a plain
  // fopen blocks until a writer comes), O_NONBLOCK makes it return at once, and fstat then sees what was
  // really opened (the path may have been replaced between the two checks).
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(path + ": is " + kind_of(st.st_mode) + ", not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": " + std::strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": is " + kind_of(st.st_mode) + ", not a regular file");
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(fdopen(fd, "rb"), &std::fclose);
  if (!f) {
    ::close(fd);
    throw Error(path + ": " + std::strerror(errno));
  }
#endif
  if (static_cast<uint64_t>(st.st_size) > max_bytes) throw Error(too_large(path, max_bytes));
  std::string data;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    data.append(buf, n);
    if (data.size() > max_bytes) throw Error(too_large(path, max_bytes));  // it grew after the stat
  }
  if (std::ferror(f.get())) throw Error(path + ": read failed");
  return data;
}

std::string join_path(const std::string& folder, const std::string& name) {
  if (folder.empty()) return name;
  char last = folder.back();
  if (last == '/' || last == '\\') return folder + name;
  return folder + "/" + name;
}

}  // namespace gsurg
