// Helpers shared by tests that touch files: a temporary file with given
// bytes, and the text a command wrote to a FILE*.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace tensorpc::test {

// A file holding `bytes`, removed when this goes.
struct TempFile {
  explicit TempFile(const std::string& bytes) {
    char tmpl[] = "/tmp/tensorpc-test-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    ::close(fd);
    path = tmpl;
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { std::filesystem::remove(path); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path;
};

// What a command wrote to a FILE*, read back as a string.
struct Capture {
  Capture() : f(std::tmpfile()) {}
  ~Capture() { std::fclose(f); }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  std::string text() const {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    return s;
  }
  std::FILE* f;
};

}  // namespace tensorpc::test
