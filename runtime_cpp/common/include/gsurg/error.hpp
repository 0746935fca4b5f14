// The runtime's one error type: every failure the user can cause (a missing file, a bad image, a prompt
// too long) is thrown as gsurg::Error with a message that names the file, blob or value, and main() turns it
// into one line on stderr and a non-zero exit.
#pragma once

#include <stdexcept>
#include <string>

namespace gsurg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace gsurg
