// `tensorpc chat`: a conversation read from a file, and the real binary
// driven through a pseudo-terminal for two turns (the second evaluating only
// its own tokens), Ctrl-C at the prompt and /exit; the errors a user sees
// for a model without a usable chat template.
#include "tensorpc/chat.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "file_util.h"
#include "test_util.h"

#ifndef TENSORPC_CLI_BINARY
#define TENSORPC_CLI_BINARY "tensorpc"
#endif

namespace tensorpc::tools {
namespace {

using test::Capture;
using test::contains;

const std::string kChatModel = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";

ChatCommandOptions greedy_chat() {
  ChatCommandOptions o;
  o.setup.model = kChatModel;
  o.setup.threads = 1;
  o.sampler.temperature = 0;
  o.n_predict = 24;
  o.verbose = true;
  return o;
}

// The tokens evaluated before each reply, from the --verbose lines.
std::vector<int64_t> evaluated_per_turn(const std::string& err) {
  std::vector<int64_t> out;
  const std::regex line(R"(\[(\d+) tokens evaluated)");
  for (auto it = std::sregex_iterator(err.begin(), err.end(), line); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stoll((*it)[1]));
  }
  return out;
}

class ChatCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kChatModel)) GTEST_SKIP() << kChatModel << " is absent (tools/train/make_bpe_model.sh)";
  }
};

TEST_F(ChatCommand, ALineIsAMessageAndEndOfInputEndsTheConversation) {
  const test::TempFile input("In the beginning God created the heaven and the earth.\n\nAnd there was light.");
  std::FILE* in = std::fopen(input.path.c_str(), "r");
  ASSERT_NE(in, nullptr);
  Capture out, err;
  const int rc = chat_command(greedy_chat(), in, out.f, err.f);
  std::fclose(in);
  ASSERT_EQ(rc, 0) << err.text();
  EXPECT_TRUE(contains(err.text(), "chat template llama3")) << err.text();
  EXPECT_TRUE(contains(err.text(), "2 turns:")) << err.text();  // the empty line is no message
  const std::vector<int64_t> evaluated = evaluated_per_turn(err.text());
  ASSERT_EQ(evaluated.size(), 2u) << err.text();
  EXPECT_LT(evaluated[1], evaluated[0]) << err.text();
  EXPECT_GT(out.text().size(), 10u) << out.text();
}

TEST_F(ChatCommand, AnUnknownTemplateNameAndAModelWithoutATemplateAreErrorsBeforeAnyUpload) {
  const test::TempFile input("hello\n");
  std::FILE* in = std::fopen(input.path.c_str(), "r");
  ASSERT_NE(in, nullptr);
  ChatCommandOptions o = greedy_chat();
  o.chat_template = "no-such-family";
  Capture out, err;
  EXPECT_EQ(chat_command(o, in, out.f, err.f), 1);
  EXPECT_TRUE(contains(err.text(), "no-such-family")) << err.text();
  EXPECT_TRUE(contains(err.text(), "chatml")) << "the valid names are listed: " << err.text();
  EXPECT_FALSE(contains(err.text(), "loading weights")) << err.text();

  // The SentencePiece bundled model has no template: the error says how to choose one.
  o = greedy_chat();
  o.setup.model = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
  Capture out2, err2;
  EXPECT_EQ(chat_command(o, in, out2.f, err2.f), 1);
  EXPECT_TRUE(contains(err2.text(), "--chat-template")) << err2.text();
  std::fclose(in);
}

// A child process on a pseudo-terminal: what it writes, and lines typed to it.
class Terminal {
 public:
  explicit Terminal(const std::vector<std::string>& args) {
    pid_ = ::forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) ::close(master_);
  }
  bool started() const { return pid_ > 0; }
  void type(const std::string& s) { ASSERT_EQ(::write(master_, s.data(), s.size()), static_cast<ssize_t>(s.size())); }
  // Reads until `count` occurrences of `what` have been seen in all output, or 60 s pass.
  bool wait_for(const std::string& what, size_t count = 1) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (occurrences(what) < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{master_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) return occurrences(what) >= count;  // the child closed the terminal
      output_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  // The exit status, waiting up to 60 s; -1 if it did not exit.
  int wait_exit() {
    for (int i = 0; i < 600; ++i) {
      drain();  // so the child never blocks writing
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        drain();
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  const std::string& output() const { return output_; }

 private:
  void drain() {
    pollfd p{master_, POLLIN, 0};
    char buf[4096];
    while (::poll(&p, 1, 0) > 0) {
      const ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) return;
      output_.append(buf, static_cast<size_t>(n));
    }
  }
  size_t occurrences(const std::string& what) const {
    size_t n = 0;
    for (size_t at = output_.find(what); at != std::string::npos; at = output_.find(what, at + 1)) ++n;
    return n;
  }
  int master_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string output_;
};

TEST_F(ChatCommand, TwoTurnsThroughAPseudoTerminalTheSecondReusingTheCache) {
  Terminal t({TENSORPC_CLI_BINARY, "chat", "-m", kChatModel, "--temp", "0", "-n", "24", "-t", "1", "--verbose",
              "-sys", "Answer with a verse."});
  ASSERT_TRUE(t.started());
  ASSERT_TRUE(t.wait_for("> ")) << t.output();
  t.type("In the beginning God created the heaven and the earth.\n");
  ASSERT_TRUE(t.wait_for("> ", 2)) << t.output();
  t.type("And there was light.\n");
  ASSERT_TRUE(t.wait_for("> ", 3)) << t.output();
  t.type("/exit\n");
  EXPECT_EQ(t.wait_exit(), 0) << t.output();
  const std::vector<int64_t> evaluated = evaluated_per_turn(t.output());
  ASSERT_EQ(evaluated.size(), 2u) << t.output();
  EXPECT_LT(evaluated[1], evaluated[0]) << t.output();
  EXPECT_TRUE(contains(t.output(), "2 turns:")) << t.output();
}

TEST_F(ChatCommand, CtrlCAtThePromptAndCtrlDEndTheConversation) {
  {
    Terminal t({TENSORPC_CLI_BINARY, "chat", "-m", kChatModel, "-t", "1"});
    ASSERT_TRUE(t.started());
    ASSERT_TRUE(t.wait_for("> ")) << t.output();
    t.type("\x03");  // the terminal sends SIGINT
    EXPECT_EQ(t.wait_exit(), 0) << t.output();
    EXPECT_TRUE(contains(t.output(), "0 turns:")) << t.output();
  }
  {
    Terminal t({TENSORPC_CLI_BINARY, "chat", "-m", kChatModel, "-t", "1"});
    ASSERT_TRUE(t.started());
    ASSERT_TRUE(t.wait_for("> ")) << t.output();
    t.type("\x04");  // end of input
    EXPECT_EQ(t.wait_exit(), 0) << t.output();
  }
}

}  // namespace
}  // namespace tensorpc::tools
