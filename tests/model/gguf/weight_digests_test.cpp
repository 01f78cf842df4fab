// WeightDigests: the digests of a model file's tensors survive in a store
// file of the file's identity; a file that changed finds none; a store file
// that is damaged or not ours is ignored; a store that cannot be written costs
// nothing but the memo on disk.
#include "model/gguf/weight_digests.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "file_util.h"
#include "model/gguf/file_io.h"

namespace tensorpc {
namespace {

using test::ScopedEnv;
using test::ScopedTempDir;

// Tests never touch the user's digest store: a model opened without a
// directory keeps its digests in memory (tests that need the variable set it
// with ScopedEnv, which restores this).
class NoUserDigestStore : public ::testing::Environment {
 public:
  void SetUp() override { ::setenv("TENSORPC_DIGEST_DIR", "off", 1); }
};
[[maybe_unused]] ::testing::Environment* const kNoUserDigestStore =
    ::testing::AddGlobalTestEnvironment(new NoUserDigestStore);

ContentDigest digest_of(uint8_t seed) {
  ContentDigest d{.known = true};
  for (size_t i = 0; i < d.sha256.size(); ++i) d.sha256[i] = static_cast<uint8_t>(seed * 31 + i);
  return d;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A "model file" of 1 MiB and its identity as MappedFile reads it.
struct ModelFile {
  explicit ModelFile(const std::string& dir) : path(dir + "/model.gguf") { rewrite('a'); }
  void rewrite(char fill, size_t size = 1 << 20) {
    write_text(path, std::string(size, fill));
    identity = MappedFile::open(path).value()->identity();
  }
  std::string path;
  FileIdentity identity;
};

class WeightDigestsTest : public ::testing::Test {
 protected:
  ScopedTempDir tmp;
  std::string store_dir = tmp.path + "/cache/tensorpc/digests";  // missing: save() creates it
  ModelFile file{tmp.path};

  // A store of three digests for `file`, saved.
  std::string saved_store() {
    WeightDigests d = WeightDigests::open(store_dir, file.identity);
    d.slot(4096, 65536) = digest_of(1);
    d.slot(69632, 131072) = digest_of(2);
    d.slot(200704, 100) = digest_of(3);
    d.slot(300000, 5);  // never hashed: not stored
    EXPECT_TRUE(d.save().ok());
    return d.path();
  }
};

TEST_F(WeightDigestsTest, KnownDigestsRoundTripThroughTheStore) {
  const std::string path = saved_store();
  EXPECT_EQ(path, store_dir + "/" + WeightDigests::file_name(file.identity));
  ASSERT_TRUE(std::filesystem::exists(path));
  struct stat st {};
  ASSERT_EQ(::stat(store_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << "the directory is the user's alone";

  WeightDigests again = WeightDigests::open(store_dir, file.identity);
  EXPECT_EQ(again.known(), 3u);
  EXPECT_TRUE(again.slot(4096, 65536).known);
  EXPECT_EQ(again.slot(4096, 65536).sha256, digest_of(1).sha256);
  EXPECT_EQ(again.slot(69632, 131072).sha256, digest_of(2).sha256);
  EXPECT_EQ(again.slot(200704, 100).sha256, digest_of(3).sha256);
  EXPECT_FALSE(again.slot(300000, 5).known);
  EXPECT_FALSE(again.slot(4096, 65535).known) << "another size is another range";
}

TEST_F(WeightDigestsTest, TheFileNameSaysTheIdentity) {
  const FileIdentity id{.device = 2049, .inode = 1234567, .size = 132000000, .mtime_ns = 1700000000123456789};
  EXPECT_EQ(WeightDigests::file_name(id), "2049-1234567-132000000-1700000000123456789.digests");
}

TEST_F(WeightDigestsTest, AFileRewrittenOrTouchedFindsNothing) {
  saved_store();
  const FileIdentity old_identity = file.identity;

  // Touched: the same bytes, another modification time.
  const timespec times[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT}, {.tv_sec = 1000000000, .tv_nsec = 5}};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.path.c_str(), times, 0), 0);
  const FileIdentity touched = MappedFile::open(file.path).value()->identity();
  EXPECT_NE(touched, old_identity);
  EXPECT_EQ(touched.mtime_ns, 1000000000000000005);
  EXPECT_EQ(WeightDigests::open(store_dir, touched).known(), 0u);

  // Rewritten: other bytes, another size.
  file.rewrite('b', 1 << 19);
  EXPECT_NE(file.identity, old_identity);
  EXPECT_EQ(WeightDigests::open(store_dir, file.identity).known(), 0u);

  // The old identity's store is still there and still its own.
  EXPECT_EQ(WeightDigests::open(store_dir, old_identity).known(), 3u);
}

TEST_F(WeightDigestsTest, AStoreFileOfAnotherIdentityUnderThisNameIsIgnored) {
  const std::string path = saved_store();
  FileIdentity other = file.identity;
  other.inode += 1;
  std::filesystem::copy_file(path, store_dir + "/" + WeightDigests::file_name(other));
  EXPECT_EQ(WeightDigests::open(store_dir, other).known(), 0u);
}

TEST_F(WeightDigestsTest, EveryTruncationOfTheStoreIsIgnored) {
  const std::string path = saved_store();
  const std::string whole = read_text(path);
  for (size_t n = 0; n < whole.size(); ++n) {
    write_text(path, whole.substr(0, n));
    EXPECT_EQ(WeightDigests::open(store_dir, file.identity).known(), 0u) << "truncated to " << n << " bytes";
  }
  write_text(path, whole);
  EXPECT_EQ(WeightDigests::open(store_dir, file.identity).known(), 3u);
}

TEST_F(WeightDigestsTest, MalformedOrForeignStoresAreIgnoredAndOverwritten) {
  const std::string path = saved_store();
  const std::string whole = read_text(path);
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = whole;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  const std::string first_hex = whole.substr(whole.find("4096 65536 ") + 11, 64);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"garbage",
       "\x7f"
       "ELF\x02\x01\x01 not a store at all\n\x00\xff"},
      {"empty", ""},
      {"another version", replaced("weight digests 1", "weight digests 2")},
      {"upper-case hex", replaced(first_hex, std::string(64, 'A'))},
      {"short hex", replaced(first_hex, first_hex.substr(1))},
      {"a non-hex digit", replaced(first_hex, "g" + first_hex.substr(1))},
      {"a negative offset", replaced("4096 65536", "-4096 65536")},
      {"an offset past 2^64", replaced("4096 65536", "18446744073709551616 65536")},
      {"a range past the file's end", replaced("4096 65536", "4096 1048577")},
      {"a range that wraps", replaced("4096 65536", "4096 18446744073709547521")},
      {"a missing field", replaced("4096 65536 ", "4096 ")},
      {"a field too many", replaced("4096 65536 " + first_hex, "4096 65536 " + first_hex + " 7")},
      {"a count that disagrees", replaced("end 3", "end 4")},
      {"bytes after the end", whole + "1 2 " + first_hex + "\n"},
      {"no end line", whole.substr(0, whole.find("end 3"))},
      {"a NUL in a number", replaced("4096 65536", std::string("40\0"
                                                               "96 65536",
                                                               11))},
      {"CRLF lines", replaced("\n", "\r\n")},
  };
  for (const auto& [what, text] : cases) {
    write_text(path, text);
    WeightDigests d = WeightDigests::open(store_dir, file.identity);
    EXPECT_EQ(d.known(), 0u) << what;
    // Saving replaces it with a good store.
    d.slot(4096, 65536) = digest_of(9);
    ASSERT_TRUE(d.save().ok()) << what;
    EXPECT_EQ(WeightDigests::open(store_dir, file.identity).known(), 1u) << what;
  }
}

TEST_F(WeightDigestsTest, AStoreTooLargeOrNotAFileIsIgnored) {
  const std::string path = saved_store();
  const std::string whole = read_text(path);
  std::string huge = whole.substr(0, whole.find("end 3"));
  const std::string line = "4096 65536 " + std::string(64, '0') + "\n";
  while (huge.size() <= (4u << 20)) huge += line;
  write_text(path, huge + "end 0\n");
  EXPECT_EQ(WeightDigests::open(store_dir, file.identity).known(), 0u);

  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  WeightDigests d = WeightDigests::open(store_dir, file.identity);
  EXPECT_EQ(d.known(), 0u);
  d.slot(1, 1) = digest_of(4);
  EXPECT_FALSE(d.save().ok()) << "a directory is in the way of the store file";
}

TEST_F(WeightDigestsTest, AnUnwritableStoreFailsOnlyTheSaveAndThenStaysInMemory) {
  const std::string under_a_file = file.path + "/digests";  // a directory inside a regular file
  WeightDigests d = WeightDigests::open(under_a_file, file.identity);
  EXPECT_EQ(d.known(), 0u);
  d.slot(4096, 65536) = digest_of(1);
  const Status s = d.save();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(under_a_file), std::string::npos) << s.to_string();
  EXPECT_EQ(d.path(), "") << "in memory only after a failure";
  EXPECT_EQ(d.save_failure().message(), s.message());
  EXPECT_TRUE(d.save().ok()) << "nothing more is tried";
  EXPECT_TRUE(d.slot(4096, 65536).known) << "the memo keeps what it knows";
}

TEST_F(WeightDigestsTest, InMemoryOnlyWritesNothing) {
  WeightDigests d = WeightDigests::open("", file.identity);
  d.slot(4096, 65536) = digest_of(1);
  EXPECT_TRUE(d.save().ok());
  EXPECT_EQ(d.path(), "");
  EXPECT_FALSE(std::filesystem::exists(store_dir));
  WeightDigests memory;
  memory.slot(1, 2) = digest_of(2);
  EXPECT_TRUE(memory.save().ok());
  EXPECT_EQ(memory.known(), 1u);
}

TEST(WeightDigestsDir, ComesFromTheVariableThenXdgThenHome) {
  {
    ScopedEnv dir("TENSORPC_DIGEST_DIR", "/srv/digests");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(WeightDigests::default_dir(), "/srv/digests");
  }
  {
    ScopedEnv dir("TENSORPC_DIGEST_DIR", "off");
    EXPECT_EQ(WeightDigests::default_dir(), "");
  }
  ScopedEnv dir("TENSORPC_DIGEST_DIR", "");  // empty counts as unset
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(WeightDigests::default_dir(), "/xdg/tensorpc/digests");
  }
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/is/invalid");
    EXPECT_EQ(WeightDigests::default_dir(), "/home/someone/.cache/tensorpc/digests");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", "");
  EXPECT_EQ(WeightDigests::default_dir(), "/home/someone/.cache/tensorpc/digests");
  ScopedEnv no_home("HOME", "");
  EXPECT_EQ(WeightDigests::default_dir(), "");
}

}  // namespace
}  // namespace tensorpc
