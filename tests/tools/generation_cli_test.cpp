// The command-line side of `tensorpc run` and `tensorpc demo`: --split
// parsing, and the errors a user sees for a missing model or server.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>

#include "file_util.h"
#include "model/gguf/gguf_bytes.h"
#include "model_setup.h"
#include "sampling_flags.h"
#include "tensorpc/demo.h"
#include "tensorpc/run.h"

namespace tensorpc::tools {
namespace {

using test::Capture;

TEST(ParseSplit, AcceptsNonNegativeRatios) {
  EXPECT_EQ(parse_split("1,1,2").value(), (std::vector<double>{1, 1, 2}));
  EXPECT_EQ(parse_split("0,0.5").value(), (std::vector<double>{0, 0.5}));
  EXPECT_EQ(parse_split("3").value(), (std::vector<double>{3}));
}

TEST(ParseSplit, RejectsWhatIsNotAListOfRatios) {
  for (const char* bad : {"", "1,,2", "1,x", "1,-1", "0,0", "1,2,", "nan", "inf,1", "1 2", "2k"}) {
    auto r = parse_split(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("--split"), std::string::npos) << r.status().to_string();
  }
}

TEST(ParseLogitBias, ReadsATokenAndASignedBias) {
  EXPECT_EQ(parse_logit_bias("15043+1.5").value(), (std::pair<int32_t, float>{15043, 1.5f}));
  EXPECT_EQ(parse_logit_bias("7-100").value(), (std::pair<int32_t, float>{7, -100.0f}));
  EXPECT_EQ(parse_logit_bias("0+0").value(), (std::pair<int32_t, float>{0, 0.0f}));
  for (const char* bad : {"", "abc", "+1", "-1+1", "5", "5+", "5+101", "5-100.5", "5+nan", "5+1x", "99999999999+1"}) {
    auto r = parse_logit_bias(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("--logit-bias"), std::string::npos) << r.status().to_string();
  }
}

// A model with tensors of types tensorpc does not run: one line naming the
// file once and every such tensor with its GGUF type name, before anything loads.
TEST(RunCommand, AModelOfTypesTensorpcDoesNotRunIsOneErrorNamingTheFileOnce) {
  test::GgufBytes b;
  b.header(3, 0)
      .tensor("token_embd.weight", {256, 4}, 16, 0)  // iq2_xxs
      .tensor("output_norm.weight", {256}, 0, 1024)
      .tensor("output.weight", {256, 4}, 19, 2048)  // iq1_s
      .pad_to(32)
      .zeros(4096);
  const test::TempFile file(std::string(b.bytes.begin(), b.bytes.end()));
  RunOptions o;
  o.setup.model = file.path;
  o.prompt = "hello";
  Capture out, err;
  EXPECT_EQ(run_command(o, out.f, err.f), 1);
  const std::string text = err.text();
  const size_t first = text.find(file.path);
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(file.path, first + 1), std::string::npos) << "the path twice: " << text;
  EXPECT_NE(text.find("'token_embd.weight' (iq2_xxs)"), std::string::npos) << text;
  EXPECT_NE(text.find("'output.weight' (iq1_s)"), std::string::npos) << text;
}

TEST(RunCommand, AMissingModelIsAnErrorNamingTheFile) {
  RunOptions o;
  o.setup.model = "/nonexistent/dir/model.gguf";
  o.prompt = "hello";
  Capture out, err;
  EXPECT_EQ(run_command(o, out.f, err.f), 1);
  EXPECT_NE(err.text().find(o.setup.model), std::string::npos) << err.text();
}

TEST(RunCommand, AnUnreadablePromptFileIsAnErrorNamingItBeforeTheModelLoads) {
  RunOptions o;
  o.setup.model = "/nonexistent/dir/model.gguf";
  o.prompt_file = "/nonexistent/dir/prompt.txt";
  Capture out, err;
  EXPECT_EQ(run_command(o, out.f, err.f), 1);
  EXPECT_NE(err.text().find("-f: cannot read /nonexistent/dir/prompt.txt"), std::string::npos) << err.text();
  EXPECT_EQ(err.text().find("model.gguf"), std::string::npos) << err.text();
}

TEST(RunCommand, APromptFromAFileRunsAndAFullContextIsSaid) {
  const test::TempFile prompt("In the beginning God");
  RunOptions o;
  o.setup.model = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
  o.setup.use_local = true;
  o.setup.threads = 1;
  o.setup.n_ctx = 16;
  o.prompt_file = prompt.path;
  o.sampler.temperature = 0;
  o.n_predict = 64;
  Capture out, err;
  ASSERT_EQ(run_command(o, out.f, err.f), 0) << err.text();
  EXPECT_EQ(out.text().rfind("In the beginning God", 0), 0u) << out.text();
  EXPECT_GT(out.text().size(), std::string("In the beginning God").size() + 8) << out.text();
  EXPECT_NE(err.text().find("generation stopped at the end of the context (16 positions"), std::string::npos)
      << err.text();
  // A context beyond the trained one (128) is allowed, with a warning.
  o.setup.n_ctx = 256;
  o.n_predict = 4;
  Capture out2, err2;
  ASSERT_EQ(run_command(o, out2.f, err2.f), 0) << err2.text();
  EXPECT_NE(err2.text().find("warning: a context of 256 positions is beyond the 128"), std::string::npos)
      << err2.text();
  EXPECT_EQ(err2.text().find("generation stopped"), std::string::npos) << err2.text();
}

// --lookup: the text of a run without it, and a line saying how its drafts fared.
TEST(RunCommand, LookupPrintsTheSameTextAndItsAcceptance) {
  RunOptions o;
  o.setup.model = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
  o.setup.use_local = true;
  o.setup.threads = 1;
  o.prompt = "and the earth was without form, and void; and the earth was without form, and";
  o.sampler.temperature = 0;
  o.n_predict = 24;
  Capture plain_out, plain_err;
  ASSERT_EQ(run_command(o, plain_out.f, plain_err.f), 0) << plain_err.text();
  EXPECT_EQ(plain_err.text().find("speculation:"), std::string::npos) << plain_err.text();
  o.lookup = {.lookup = true, .draft_max = 4};
  Capture out, err;
  ASSERT_EQ(run_command(o, out.f, err.f), 0) << err.text();
  EXPECT_EQ(out.text(), plain_out.text());
  EXPECT_NE(err.text().find("drafted tokens accepted"), std::string::npos) << err.text();
}

// --draft-model: the bundled chat model with its bundled draft model gives
// the text of a run without it, most guesses right; a draft model of another
// vocabulary is refused before generation, naming the difference.
TEST(RunCommand, ADraftModelPrintsTheSameTextAndAnotherVocabularyIsRefused) {
  const std::string models = std::string(TENSORPC_SOURCE_DIR) + "/models/";
  RunOptions o;
  o.setup.model = models + "kjv-bpe.gguf";
  o.setup.threads = 1;
  o.prompt = "And the LORD said unto Moses";
  o.sampler.temperature = 0;
  o.n_predict = 40;
  Capture plain_out, plain_err;
  ASSERT_EQ(run_command(o, plain_out.f, plain_err.f), 0) << plain_err.text();
  o.setup.draft_model = models + "kjv-bpe-draft.gguf";
  Capture out, err;
  ASSERT_EQ(run_command(o, out.f, err.f), 0) << err.text();
  EXPECT_EQ(out.text(), plain_out.text());
  EXPECT_NE(err.text().find("draft model " + models + "kjv-bpe-draft.gguf: 2 layers on cpu"), std::string::npos)
      << err.text();
  EXPECT_NE(err.text().find("speculation: "), std::string::npos) << err.text();
  o.setup.draft_model = models + "kjv-tiny.gguf";
  Capture bad_out, bad_err;
  EXPECT_EQ(run_command(o, bad_out.f, bad_err.f), 1);
  EXPECT_NE(bad_err.text().find("kjv-tiny.gguf: the draft model's vocabulary has 2048 tokens, the model's 4096"),
            std::string::npos)
      << bad_err.text();
  EXPECT_EQ(bad_out.text(), "") << "refused before the prompt is echoed";
}

TEST(RunCommand, APromptLongerThanTheContextIsRefusedBeforeItIsEchoed) {
  RunOptions o;
  o.setup.model = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-tiny.gguf";
  o.setup.threads = 1;
  o.setup.n_ctx = 16;
  for (int i = 0; i < 20; ++i) o.prompt += "and the earth ";
  Capture out, err;
  EXPECT_EQ(run_command(o, out.f, err.f), 1);
  EXPECT_EQ(out.text(), "") << "the prompt was echoed";
  EXPECT_NE(err.text().find("tensorpc run: the prompt has "), std::string::npos) << err.text();
  EXPECT_NE(err.text().find("the context holds 16, the reply included (-c sets it)"), std::string::npos) << err.text();
  EXPECT_EQ(err.text().find("out of memory"), std::string::npos) << err.text();
}

TEST(RunCommand, AGrammarFileShapesTheTextAndABadOneIsRefused) {
  const test::TempFile grammar("root ::= \"Amen\" | \"Selah\"\n");
  RunOptions o;
  o.setup.model = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";
  o.setup.threads = 1;
  o.prompt = "And all the people said";
  o.n_predict = 16;
  o.sampler.temperature = 1.0f;
  o.grammar_file = grammar.path;
  Capture out, err;
  ASSERT_EQ(run_command(o, out.f, err.f), 0) << err.text();
  const std::string text = out.text().substr(o.prompt.size());
  EXPECT_TRUE(text == "Amen\n" || text == "Selah\n") << "'" << text << "'";

  const test::TempFile bad("root ::= x\n");
  o.grammar_file = bad.path;
  Capture out2, err2;
  EXPECT_EQ(run_command(o, out2.f, err2.f), 1);
  EXPECT_NE(err2.text().find("--grammar: grammar: line 1, column"), std::string::npos) << err2.text();
  EXPECT_EQ(out2.text(), "");
}

TEST(DemoCommand, AMissingModelIsAnErrorNamingTheFile) {
  DemoOptions o;
  o.model = "/nonexistent/dir/kjv-tiny.gguf";
  Capture out, err;
  EXPECT_EQ(demo_command(o, out.f, err.f), 1);
  EXPECT_NE(err.text().find(o.model), std::string::npos) << err.text();
  EXPECT_NE(err.text().find("missing"), std::string::npos) << err.text();
}

}  // namespace
}  // namespace tensorpc::tools
